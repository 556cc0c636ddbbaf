package localinfra

import _ "github.com/nats-io/nats.go/jetstream"
