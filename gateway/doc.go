// Package gateway is Ninja's connection manager for leasehold: an HTTP
// (and gRPC) proxy for clients that cannot link the Lookup library. It keeps
// one Lookup per namespace, sends each request to the Owner of its key,
// retries an Owner's refusals (owner.Refuse) within the request's deadline,
// admits or sheds load by priority class, and relays loss notifications as
// Server-Sent Events. `leasehold gateway` runs it; docs/gateway.md is the
// full description.
//
// # Usage
//
//	g, err := gateway.New(ctx, gateway.Config{
//		Manager: "127.0.0.1:7400",
//		Routes: []gateway.Route{{Name: "kv", Prefix: "/kv/", Key: "path:1"}},
//	})
//	if err != nil { ... }
//	defer g.Close()
//	srv := &http.Server{Addr: ":7490", Handler: g}
//	go srv.ListenAndServe()
//	...
//	g.Shutdown()              // not ready; the loss streams end
//	srv.Shutdown(drainCtx)    // the requests in flight finish
//
// # Concurrency
//
// A Gateway is an http.Handler safe for concurrent use. Its only shared
// state is the Lookups' copies (read without locks), each namespace's
// admission queue (one mutex), the per-Owner counters (atomics) and the
// last 1024 loss notifications (one mutex).
package gateway
