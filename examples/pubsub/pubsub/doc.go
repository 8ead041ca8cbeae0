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
// Every operation runs the five steps of P§2.2 under one mutex; each
// stream's writer checks CheckLeaseContinuous before every message. A
// publish answers once written to every open stream (or after 2 s), so a
// subscriber receives every message published after its subscription was
// made and acknowledged before its stream ended, and none acknowledged
// before it asked. A reconnecting subscriber resumes after the last message
// it received if that was the last written to it (else it is made afresh);
// planned moves hand subscriptions over with their queued messages.
package pubsub
