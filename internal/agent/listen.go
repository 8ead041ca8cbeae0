package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// ListenUnix listens on a Unix socket at path that only this user can
// reach: its directory is created 0700 if missing, and refused if another
// user owns it or others may write to it; the socket is made 0600 before any connection is
// accepted (the umask covers the moment in between), and a connection
// from another user (SO_PEERCRED, where the platform has it) is closed at
// once. A stale socket file at path, left by an agent that died, is
// replaced; anything else there is an error.
func ListenUnix(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("agent: the socket's directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("agent: the socket's directory: %w", err)
	}
	if uid, ok := fileUID(fi); ok && uid != os.Getuid() {
		return nil, fmt.Errorf("agent: the socket's directory %s belongs to another user (uid %d): use a directory of your own", dir, uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("agent: the socket's directory %s is writable by others (%v): another user could replace the socket; use a directory only you can write to", dir, fi.Mode().Perm())
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("agent: %s exists and is not a socket", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("agent: %s is in use: another agent serves on it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("agent: removing the stale socket: %w", err)
		}
	}
	l, err := listenPrivate(path)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("agent: %w", err)
	}
	return sameUser{l}, nil
}

// ListenLoopback listens on a loopback TCP address, for an application
// that cannot reach a Unix socket. Any local user can connect there, so
// the agent also needs a token (NewToken) that the application presents.
func ListenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("agent: --listen %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, errors.New("agent: the TCP listener must be on a loopback address (127.0.0.1 or ::1): the application runs on this host")
	}
	return net.Listen("tcp", addr)
}

// NewToken writes a fresh random token to path, readable only by this
// user, and returns it.
func NewToken(path string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(b)
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("agent: writing the token: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return "", fmt.Errorf("agent: %w", err)
	}
	return tok, nil
}

// sameUser closes connections from other users (peerUID).
type sameUser struct{ net.Listener }

func (l sameUser) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if uid, ok := peerUID(c); ok && uid != os.Getuid() && uid != 0 {
			_ = c.Close()
			continue
		}
		return c, nil
	}
}
