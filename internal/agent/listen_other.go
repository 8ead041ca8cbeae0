//go:build !linux

package agent

import (
	"io/fs"
	"net"
)

// fileUID is not read here.
func fileUID(fs.FileInfo) (int, bool) { return 0, false }

// listenPrivate listens on a Unix socket; ListenUnix makes it 0600 before
// serving.
func listenPrivate(path string) (net.Listener, error) { return net.Listen("unix", path) }

// peerUID is not read here: the socket's permissions keep others out.
func peerUID(net.Conn) (int, bool) { return 0, false }
