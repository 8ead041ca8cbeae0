// Package kv is the distributed soft-state hashtable of PRS Figure 4 (P§2.2)
// as a program: an in-memory key-value store partitioned by leasehold, built
// only on the public owner, lookup, keyspace and protocol packages.
//
// A Server keeps values in memory and links the Owner library: the Manager
// leases it ranges of the key space, and it serves a key only while it holds
// the key's lease. A Client links the Lookup library to send each request to
// the server that owns the key, and retries while ownership moves.
//
// # Usage
//
//	srv, err := kv.NewServer(ctx, kv.ServerConfig{
//		Manager: "127.0.0.1:7400",
//		Listen:  "127.0.0.1:8001",
//	})
//	if err != nil { ... }
//	defer srv.Close(ctx) // hands the ranges back at once
//
//	c, err := kv.NewClient(ctx, kv.ClientConfig{Manager: "127.0.0.1:7400"})
//	if err != nil { ... }
//	defer c.Close()
//	err = c.Put(ctx, "alice", []byte("1"))
//	v, err := c.Get(ctx, "alice") // kv.ErrNotFound when the owner has no value
//
// # HTTP
//
//	PUT /kv/{key}   body: the value (at most MaxValueBytes) → 204
//	GET /kv/{key}   → 200 with the value, or 404 "not found"
//	GET /healthz    → 200 "ok"
//
// The key is one path segment, URL-path-escaped (url.PathEscape). A server
// that does not hold the key's lease answers 421 Misdirected Request with
// "not the owner", and one whose lease ended during the request answers 421
// "lease lost"; the Client then looks the key up again and retries.
//
// # Five steps per request
//
// Every handler follows the Owner API's pattern (P§2.2, Figure 4; see the
// owner package): (1) CheckLeaseNow on the key, else 421; (2) validate the
// stored value: a value stored under another LeaseNum is stale and is
// dropped; (3) operate, storing the LeaseNum with what is stored; (4)
// CheckLeaseContinuous with the number from step 1, else 421; (5) respond.
//
// # Soft state
//
// Values live only in the memory of the server that owns the key. When a
// key's lease moves without migration — its server crashed, left, or had the
// range recalled for a new server — the value is gone: the new owner answers
// 404, never an older value, and the Lookup library raises a loss
// notification so clients can republish (P§2.1). A restarted server starts
// empty.
package kv
