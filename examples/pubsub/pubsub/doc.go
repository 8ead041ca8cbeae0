// Package pubsub is PRS's publish-subscribe service (P§3, P§3.1) on the
// public owner, lookup, keyspace and protocol packages: topics are keys,
// and the Owner of a topic's key holds its subscriptions in memory. The
// example's README has the tour.
//
//	GET  /sub/{topic}?id=SUBID[&last=MSGID]   server-sent events
//	POST /pub/{topic}[?id=MSGID]              body: the message → 200 JSON Published
//
// Each event's data is a JSON Event. A stream starts with "subscribed"
// (New says the subscription was made afresh, so messages since the
// subscriber's last stream may have gone to nobody), carries "message"
// events, and ends with "end" and a reason: moved (reconnect), lost (the
// lease ended: resubscribe), replaced, overflow, closing. Refusals follow
// the Owner contract (owner.Refuse): 421 not the topic's Owner, 503 its
// range is moving; the Client retries both.
//
// Every operation runs the five steps of P§2.2 under one mutex: (1)
// CheckLeaseNow on the topic's key; (2) subscriptions stored under another
// LeaseNum are dropped; (3) operate, storing the LeaseNum; (4)
// CheckLeaseContinuous — and each stream's writer checks it again before
// every message it writes; (5) answer. A publish answers once its message
// is written to every open stream (or after 2 s), so a subscriber receives
// every message published after its subscription was made and
// acknowledged before its stream ended, and none acknowledged before it
// asked. A reconnecting subscriber names the last message it received and
// resumes if that was the last written to it (else it is made afresh);
// planned moves hand every subscription over with its queued messages; a
// loss notification makes the Client resubscribe.
package pubsub
