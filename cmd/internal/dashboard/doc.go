// Package dashboard is leasehold's live web dashboard: the key space as a
// ring coloured by Owner, the Owners with their load, the hot keys, the
// Manager's replicas and a timeline of changes, planned moves and loss
// notifications, with one action, draining an Owner.
//
// It is a client of the Manager (see the leasehold dashboard command and
// docs/operations.md, "The dashboard"). A Hub takes its data from a Source —
// in the command, a Lookup per namespace for the tables and the Manager's
// Status and Drain calls; in tests, a table of their own — and the Lookups'
// upcalls (Hub.Changed, Hub.Lost) for the timeline. Hub.Run asks for the
// status once per Config.Refresh and, whenever something changed, builds
// one view (JSON) at most once per Config.Coalesce and sends that same view
// to every open event stream. The Manager's cost therefore does not depend
// on the number of viewers, and a slow viewer skips views rather than
// holding the others up.
//
// The page (web/) is html/template and plain JavaScript, embedded in the
// binary; there is no build step. It draws the key space to a canvas from
// Config.Buckets arcs, each the Owner holding most of it, so a table of
// 10,000 Owners × 64 ranges reaches the browser as a few kilobytes of
// arcs; the page asks Handler's /api/segment for the range under the
// pointer. What it drew is left in data attributes (#ring's data-holders,
// data-lsn; the body's data-render-ms) for tests.
//
// # Usage
//
//	hub, err := dashboard.NewHub(dashboard.Config{Source: src})
//	…
//	go hub.Run(ctx)
//	http.ListenAndServe("127.0.0.1:7480", hub.Handler("10.0.0.1:7400"))
//
// with the Lookups' Config.OnUpdate and OnLoss calling hub.Changed and
// hub.Lost for their namespace.
package dashboard
