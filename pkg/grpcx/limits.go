package grpcx

import "time"

// The message size limits of every gRPC server and client of Keyhouse (NewServer, Dial).
// gRPC's default receive limit, 4 MiB, is below answers the REST contract allows: a
// list-releases page of 450 releases with 10,000-character ASCII notes is 4.5 MB. An
// answer over a limit fails the call with ResourceExhausted, which the gateway answers
// 500 (docs/ARCHITECTURE.md, Calling the services directly), so each limit is sized from
// the largest message the contract allows, and limits_test.go builds those messages and
// checks that they fit.
const (
	// MaxAnswerBytes bounds an answer (a server's send, a client's receive). The largest
	// is a list-releases page (api.md: limit 1-1000, release field caps in characters,
	// at most 4 bytes each in UTF-8; addendum: caps count code points). One row:
	//
	//	product_id 200 + version 100 + channel 100 + platform 100 + artifact_url 2,048
	//	+ checksum 256 + release_notes 10,000 = 12,804 characters × 4   = 51,216 bytes
	//	7 tags and length prefixes (1 + 3 bytes each)                    =     28
	//	id (1 + 5), status "unpublished" (1 + 1 + 11), created_at (≤ 19),
	//	the row's own tag and length (1 + 3)                             ≈     31
	//	                                                                 ≈ 51,275 bytes
	//
	// × 1,000 rows ≈ 51.3 MB (48.9 MiB). The other large answers are smaller: a
	// check-update batch (256 manifests of the same fields and a signature) ≈ 13.7 MB, an
	// events page of 1,000 license records (tier 200, product_id 200, issued_to 1,000
	// characters, the 10 limit keys) ≈ 6.5 MB, a list-licenses page ≈ 6.4 MB. 64 MiB
	// leaves a quarter of headroom for a field added later. What the contract does not
	// bound (the seats of one license, which list-activations and the data export return
	// whole) meets this limit only past some 60,000 seats of 256-character instance ids.
	MaxAnswerBytes = 64 << 20

	// MaxRequestBytes bounds a request (a server's receive, a client's send). Every
	// request comes from a REST body of at most 1 MiB (addendum §6) turned into protobuf
	// by the gateway, or from a service's own call (the largest: a batch of 256 hot-path
	// requests of a few hundred bytes each). protojson → protobuf grows a body most in a
	// google.protobuf.Value list of one-digit numbers: "0," (2 bytes) becomes a tag, a
	// length and a tagged double (1 + 1 + 1 + 8 = 11 bytes), 5.5 times as much: a 1 MiB
	// body is at most 5.5 MiB. 8 MiB holds that with room, and keeps what one call of a
	// direct caller can make a service hold well below MaxAnswerBytes.
	MaxRequestBytes = 8 << 20
)

// maxConcurrentStreams bounds the calls in flight on one connection to a service. An
// answer waiting for its caller to read it stays in the server's memory until it is
// written, so a caller that asks and never reads pins up to maxConcurrentStreams answers
// per connection (before this bound, one connection pinned 800 MB with 150 list-releases
// calls). The gateway multiplexes every request it sends a service on one connection per
// replica: at most 512 at once under the bench's heaviest load (the overload report's
// 512 client connections, each with one request in flight, and the hot routes' batches
// fewer still), so 1,024 limits none of its concurrency; a call past the bound waits on
// the client for a stream to finish, it does not fail.
const maxConcurrentStreams = 1024

// Keepalive of every server: a connection with nothing received for keepaliveTime is
// pinged, and closed if the ping is not answered within keepaliveTimeout. A caller that
// stops reading its connection (so never answers the ping) loses it, and the answers it
// held, within 40 s instead of MaxConnectionAge plus its grace (2.5 minutes).
const (
	keepaliveTime    = 30 * time.Second
	keepaliveTimeout = 10 * time.Second
)
