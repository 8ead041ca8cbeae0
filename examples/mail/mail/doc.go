// Package mail is Porcupine's mail service (porcupine-tocs2000 §3–§5) on
// the public owner, lookup, keyspace and protocol packages; the Owner of a
// user's key is the user's manager. The example's README has the tour.
//
//	POST /mail/{user}?id=ID   body: the message → 204, X-Node: where it was stored
//	GET  /mail/{user}         → 200 JSON Mailbox
//
// Messages are hard state: written and synced in a mailbox fragment, one
// file per user per node. The mail map — which nodes hold a fragment of
// each user — is soft state at the user's Owner, rebuilt from every node's
// disk when a range is granted, and tagged with that grant (range and
// LeaseNum, Porcupine's epoch), so a rebuild never mixes two ownerships.
// Delivery and reading follow the five steps of P§2.2: CheckLeaseNow
// (else 421); the map of that lease (503 until every node has answered or
// failed); store on the least loaded of the user's fragment nodes, topped
// up with random ones below Spread, or gather the fragments;
// CheckLeaseContinuous (else 421); answer. A delivery is acknowledged only if the lease held
// from before the message was stored until after, so the next Owner's
// rebuild, which begins after that lease, finds it. A delivery retried
// after 421 keeps its ID, and a read shows each ID once.
package mail
