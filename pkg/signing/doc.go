// Package signing produces the exact bytes Keyhouse signs and the signatures over them
// (addendum §5): a canonical JSON serializer byte-identical to JavaScript's JSON.stringify,
// RSASSA-PKCS1-v1_5/SHA-256 signatures (offline export, release manifests), hex
// HMAC-SHA256 (the plain export's "sig"), AES-256-GCM sealing of the ".lic" file, and the
// Keyring that holds all three secrets and never prints them.
//
// # Canonical JSON
//
// Marshal writes compact JSON exactly as JSON.stringify would write the same JavaScript
// value, and only values for which that is unambiguous, so an independent verifier that
// parses a response and re-serializes it with JSON.stringify reproduces the signed bytes:
//
//   - Field order is stated by the caller with Object (NewObject(...).Add(name, value)).
//     Structs are refused: their field order is a Go detail, not a contract.
//   - Maps with string keys are written with sorted keys. The order is the one a JavaScript
//     verifier ends up with after sorting: array-index keys ("0", "1", "10", ...) first in
//     ascending numeric order (JS engines always hoist them), then every other key in UTF-16
//     code unit order (Array.prototype.sort's default). For the ASCII keys api.md allows in
//     limits this is plain byte order. A nil map is written as {} and a nil slice as [];
//     a nil pointer, nil interface or nil *Object is null.
//   - Strings escape only what JSON.stringify escapes: `"`, `\`, \b \f \n \r \t, and other
//     code points below U+0020 as \u00xx with lower-case hex. <, >, &, U+2028 and U+2029
//     stay literal. A string (or key) that is not valid UTF-8 is refused with
//     ErrUnsupportedValue instead of being altered: signing bytes that differ from the value
//     the caller holds would produce signatures nobody can reproduce. (JSON decoding and
//     PostgreSQL text both guarantee valid UTF-8, so this does not happen in practice.)
//   - Numbers are written as ECMAScript Number::prototype.toString does: shortest
//     round-trip digits, integers without ".0", plain notation for 1e-6 <= |x| < 1e21
//     ("0.000001", "100000000000000000000"), otherwise exponent form ("1e+21",
//     "9.5e-7", "1.5e-7"); -0 is "0". NaN and ±Inf are
//     refused (JSON.stringify would write null). Go integer types are accepted only within
//     ±(2^53-1) (Number.MAX_SAFE_INTEGER), because beyond that a JavaScript verifier cannot
//     hold the value and would re-serialize different digits.
//   - time.Time is written as a string by FormatTime: RFC 3339 in UTC with "Z", seconds
//     always present, and a fractional part of 0, 3, 6 or 9 digits (none when the
//     sub-second part is zero, otherwise the shortest of those that is exact), e.g.
//     "2026-11-22T10:00:00Z", "2026-11-22T10:00:00.120Z", "2026-11-22T10:00:00.123456Z".
//     This is the layout protojson / grpc-gateway use for google.protobuf.Timestamp, so a
//     timestamp the gateway renders and the one that was signed are the same string either
//     way. Years outside 0001-9999 are refused.
//   - []byte is refused (JSON.stringify has no byte strings; encode it yourself).
//
// A verifier on the server side (verify-license-file) must serialize the submitted values
// as submitted: pass expires_at as the string the client sent, not a re-parsed time.
package signing
