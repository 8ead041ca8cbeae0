// Package pubsub is PRS's publish-subscribe service (P§3, P§3.1) as a
// program, built only on the public owner, lookup, keyspace and protocol
// packages: topics are keys, and the Owner of a topic's key holds the
// topic's subscriptions in memory.
//
// # HTTP
//
//	GET  /sub/{topic}?id=SUBID[&last=MSGID]   server-sent events (below)
//	POST /pub/{topic}[?id=MSGID]              body: the message (at most MaxMessageBytes) → 200 Published
//	POST /internal/handover                   subscriptions handed over by another server → 204
//	GET  /healthz                             → 200 "ok"
//
// A stream starts with an "subscribed" event (JSON Subscribed: New says the
// subscription was made afresh), then one "message" event per message (JSON
// Message), and ends with an "end" event naming why: "moved" (the topic's
// range is being handed over: reconnect), "lost" (the lease it was made
// under ended: resubscribe), "replaced" (another stream took the
// subscription over), "overflow" (more than MaxQueue messages behind),
// "closing". A server that does not hold the topic answers 421, one whose
// topic is moving 503 with Retry-After; the Client retries both.
//
// # The Owner API's duties
//
// Every operation runs the five steps of P§2.2 under one mutex
// (topics.go): (1) CheckLeaseNow on the topic's key, else 421; (2) take up
// handed-over subscriptions, and drop every subscription of the topic
// stored under another LeaseNum (its stream ends "lost"); (3) operate,
// storing the LeaseNum with each subscription; (4) CheckLeaseContinuous —
// and each stream's writer checks it again before every message it writes,
// so nothing leaves the server once the lease it was queued under has
// ended; (5) answer. OnChange is used only to take up handed-over state
// early, to wake streams whose ranges were revoked, and to start handovers;
// correctness never rests on it. The Client's Lookup is a hint: a 421 or a
// refused connection is retried after a backoff, and a loss notification
// covering a topic makes its subscriptions resubscribe (P§2.1).
//
// # The promise
//
// A publish answers once its message is queued for every subscription of
// the topic and written to every stream open then (or after 2 s). So a
// subscriber receives every message published after its subscription was
// made (the "subscribed" event) and acknowledged before its stream ended,
// and none acknowledged before it asked. A subscriber that reconnects names
// the last message it received, and the subscription resumes after it; a
// subscriber whose subscription was lost (its Owner crashed) gets one made
// afresh (New), within the notification bound of the crash: messages
// published in between went to nobody. Planned moves hand every
// subscription over with its queued messages, so a drain or a rolling
// restart is not noticed. Duplicates are possible only when a publish is
// retried after its Owner crashed having written it.
package pubsub
