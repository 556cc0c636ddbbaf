// Package ratelimit is the gateway's Redis-backed fixed-window rate limiter.
package ratelimit

import _ "github.com/redis/go-redis/v9"
