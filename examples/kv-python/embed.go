// Package kvpython carries examples/kv-python's Python files, so that the
// tour (leasehold-demo agent) can run them from any directory.
package kvpython

import "embed"

// Files holds kv.py and leasehold_agent.py.
//
//go:embed kv.py leasehold_agent.py
var Files embed.FS
