// Package presence is Live Mesh's presence (device connectivity) service
// (C§5, P§3) as a program, built only on the public owner, lookup,
// keyspace and protocol packages: devices heartbeat their status to the
// Owner of their user's key, and queries ("which of my devices are
// online?") go to the same Owner.
//
// # HTTP
//
//	PUT /presence/{user}/{device}?seq=N   body: the status (at most MaxStatusBytes) → 204
//	GET /presence/{user}                  → 200 JSON Answer
//	GET /healthz                          → 200 "ok"
//
// A server that does not hold the user's lease answers 421 "not the
// owner", one whose lease ended during the request 421 "lease lost"; the
// Client looks the user up again and retries. seq is the device's
// heartbeat counter: a heartbeat older than the one stored is acknowledged
// but changes nothing, so a retried or reordered heartbeat never rolls a
// status back.
//
// # Soft state, republished
//
// The statuses live only in the memory of the user's Owner, each user's
// stored with the LeaseNum it was stored under. When the user's key moves
// — its Owner crashed, or drained (this service hands nothing over:
// owner.Config.Handovers is off) — the state is gone, and the Lookup
// library raises a loss notification: the Client then sends every device's
// last heartbeat again at once (C§2.2, P§2.1), besides the next one due. A
// device not heard from for the server's TTL is offline.
//
// # Never a stale answer
//
// Both operations follow the five steps of P§2.2: (1) CheckLeaseNow on the
// user's key, else 421; (2) the user's state stored under any other
// LeaseNum is dropped — another server may have held the user in between,
// and missed heartbeats; (3) operate, storing the LeaseNum; (4)
// CheckLeaseContinuous, else 421; (5) answer. So an answer comes only from
// a server that held the user's lease without a break since it stored
// what it answers with, and every heartbeat acknowledged before the query
// was sent reached that server under that lease (or an answer without the
// device would say so). No answer carries a status older than the last
// heartbeat acknowledged before the query.
package presence
