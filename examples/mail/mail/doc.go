// Package mail is Porcupine's mail service (porcupine-tocs2000: §3 and
// §4) as a program, built only on the public owner, lookup, keyspace and
// protocol packages. leasehold plays Porcupine's user map: the Owner of a
// user's key is the user's manager.
//
// # Hard state and soft state
//
// Messages are hard state: each is stored durably (written and synced) in
// a mailbox fragment on one node's disk, one file per user per node, and
// survives crashes. The mail map — which nodes hold a fragment of each
// user — is soft state, held in memory by the Owner of the user's key.
// When a server is granted a range (the OnChange upcall, or the first
// request that finds the grant before the upcall), it rebuilds the range's
// mail map from the nodes' disks: it asks every node which users of the
// range it holds fragments for (GET /internal/users), and asks again,
// every half second, those that did not answer. The map is tagged with
// the lease it is rebuilt under (range and LeaseNum, Porcupine's epoch):
// an answer that arrives after that lease ended is thrown away, so a
// rebuild never mixes two ownerships, and requests use only the map of
// the lease CheckLeaseNow returns.
//
// # Delivery and retrieval
//
//	POST /mail/{user}?id=ID   body: the message (at most MaxMessageBytes) → 204, X-Node: where it was stored
//	GET  /mail/{user}         → 200 JSON Mailbox
//
// Both go to the user's Owner and follow the five steps of P§2.2: (1)
// CheckLeaseNow, else 421; (2) the mail map rebuilt under that lease,
// else 503 while the rebuild has not asked every node once; (3) deliver:
// store the message on the least loaded of the user's fragment nodes,
// with random other nodes added while there are fewer than Spread
// (Porcupine's spread-limited load balancing; a node's load is its
// pending disk operations, piggybacked on its answers, plus the requests
// this server has under way to it), and record the node in the mail map;
// or read: gather the fragments from the nodes the map names; (4)
// CheckLeaseContinuous, else 421; (5) answer. A read names the nodes it
// could not read (Incomplete): nodes down, or not heard from since the
// range was granted.
//
// # Why no delivered message is lost or shown twice
//
// A delivery is acknowledged only if the lease held from before the
// message was stored until after (step 4), so the next Owner's lease, and
// its rebuild, began after the message was on disk: the rebuild finds it.
// A delivery whose lease ended is answered 421 and retried by the Client
// under the same ID; the copy it may have left is found by a later
// rebuild, and a read shows each ID once.
package mail
