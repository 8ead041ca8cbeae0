// Package mail is Porcupine's mail service (porcupine-tocs2000 §3–§5) on
// the public owner, lookup, keyspace and protocol packages; the Owner of a
// user's key is the user's manager. The example's README has the tour.
//
//	POST /mail/{user}?id=ID   body: the message → 204, X-Node: where it was stored
//	GET  /mail/{user}         → 200 JSON Mailbox
//
// Messages are hard state: synced in a mailbox fragment, one file per user
// per node. The mail map (which nodes hold each user's fragments) is soft
// state at the Owner, rebuilt from every disk when a range is granted and
// tagged with that grant (Porcupine's epoch), so it never mixes two
// ownerships. Requests follow P§2.2's five steps: CheckLeaseNow (else 421);
// that lease's map (503 until every node answered or failed); store on the
// least loaded fragment node, or gather; CheckLeaseContinuous (else 421);
// answer. A delivery is acknowledged only if the lease held across the
// store, so the next Owner's rebuild finds it; a retry keeps its ID, and a
// read shows each ID once.
package mail
