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
//		Manager:  "127.0.0.1:7400",
//		Listen:   "127.0.0.1:8001",
//		ID:       "kv-1",
//		CertsDir: "/etc/leasehold/certs", // or Insecure: true for plaintext
//	})
//	if err != nil { ... }
//	defer srv.Close(ctx) // drains: every range moves to the others with its values
//
//	c, err := kv.NewClient(ctx, kv.ClientConfig{Manager: "127.0.0.1:7400", CertsDir: "/etc/leasehold/certs"})
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
//	GET /standbys   → 200 JSON: this server's standby roles (ServerConfig.Standbys)
//	POST /internal/migrate   a range's values handed over by another server → 204
//	POST /internal/standby   a holder's writes and fills, to its standby → 204, 409 refused
//
// The key is one path segment, URL-path-escaped (url.PathEscape). A server
// that does not hold the key's lease answers 421 Misdirected Request with
// "not the owner", and one whose lease ended during the request answers 421
// "lease lost"; the Client then looks the key up again and retries. While
// the key's range moves to another server with its values, a write is
// answered 503 Service Unavailable "moving" (with Retry-After), and the new
// server may answer 503 "arriving" for a moment until it has taken the
// values up; the Client retries those too. Every refusal carries the
// header Leasehold-Refused (not-owner or moving), the Owner contract of
// owner.Refuse, so the leasehold gateway retries it too (docs/gateway.md).
//
// POST /internal/migrate is for the other servers: a JSON body
//
//	{"from":"kv-1","to":"kv-2","within_ms":1800,
//	 "ranges":[{"start":N,"end":N,"epoch":N,"lgn":N,
//	            "entries":[{"key":"alice","value":"<base64>"}]}]}
//
// of at most MaxMigrateBytes (413 beyond), naming this server's ID in "to"
// (409 otherwise); anything malformed — unknown fields, a key outside its
// range, a within_ms over MaxMigrateWithin,
// an oversized value — is refused with 400 and a message. Keep it
// off the network clients reach, as any internal endpoint.
//
// # Five steps per request
//
// Every handler follows the Owner API's pattern (P§2.2, Figure 4; see the
// owner package): (1) CheckLeaseNow on the key, else 421; (2) validate the
// stored value: a value stored under another LeaseNum is stale and is
// dropped; (3) operate, storing the LeaseNum with what is stored; (4)
// CheckLeaseContinuous with the number from step 1, else 421; (5) respond.
//
// # Planned moves
//
// When the Manager moves a range between two live servers — one drains
// before a restart (Close, SIGTERM on kv serve, leasehold drain), another
// joins — it asks the holder to hand the range's state over (C§2.1.2): the
// server copies the range's values, refuses writes on it from then on, and
// POSTs them to the next owner, which keeps them aside. Once that server
// has them, the holder calls owner.Owner.HandoverDone and the Manager
// grants the range to the next owner marked migrated; the next owner takes
// the values up, under its new lease, and Lookups raise no loss
// notification. A grant without the mark means the handover did not
// complete in time: the values received are thrown away. Reads are served
// by the old owner until the range is gone from it.
//
// # Standbys
//
// With ServerConfig.Standbys 1 (kv serve --standbys 1), in a namespace
// whose Manager names a standby Owner for each range (leasehold manager
// --standbys), a server sends each write to its range's standby and
// answers 204 only once the standby stored it; one the standby does not
// take within a second is answered 503 "standby" and retried. A standby
// newly named is filled with a copy of the range, like a handover, and
// then reports in sync. When a holder crashes, the Manager grants its
// ranges to their in-sync standbys, marked promoted, once its leases have
// provably ended: the standby serves the copy, and no loss is notified
// (standby.go, docs/standbys.md). POST /internal/standby takes
//
//	{"from":"kv-1","to":"kv-2","start":N,"end":N,"epoch":N,"lgn":N,"sgn":N,
//	 "fill":false,"first":false,"last":false,
//	 "entries":[{"key":"alice","value":"<base64>","seq":N}]}
//
// and stores it only if this server is the range's standby under that
// holder, lease and SGN (owner.Owner.CheckStandbyWrite), answering 409
// with the refusal otherwise.
//
// # Soft state
//
// Without standbys, values live only in the memory of the server that owns
// the key. When a
// key's lease moves without migration — its server crashed, or a handover
// failed or ran past its deadline — the value is gone: the new owner
// answers 404, never an older value, and the Lookup library raises a loss
// notification so clients can republish (P§2.1). A server restarted after
// a crash starts empty; one restarted gracefully gets its share back from
// the others, values and all.
package kv
