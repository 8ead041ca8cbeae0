// Package pubsub is PRS's publish-subscribe service (P§3, P§3.1) on the
// public owner, lookup, keyspace and protocol packages: topics are keys,
// and the Owner of a topic's key holds its subscriptions in memory.
//
//	GET  /sub/{topic}?id=SUBID[&last=MSGID]   server-sent events of JSON Events
//	POST /pub/{topic}[?id=MSGID]              body: the message → 200 JSON Published
//
// A stream starts with "subscribed" (New: made afresh, so messages since
// the subscriber's last stream may have gone to nobody), carries "message"
// events, and ends with "end" and a reason: moved, lost, replaced,
// overflow, closing. Refusals follow owner.Refuse (421 not the Owner, 503
// moving); the Client retries both.
//
// The promise it keeps (a subscriber receives every message published
// after it subscribed, once and in order) and how: README.md.
package pubsub
