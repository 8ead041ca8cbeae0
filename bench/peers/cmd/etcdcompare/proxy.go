package main

import (
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// proxy is a TCP proxy in front of a server for one client. It counts the
// bytes it carries in both directions (the server's traffic with that
// client, TCP payload only) and is the crash switch: Kill closes the
// listener and every connection, so the client can neither talk nor
// reconnect, and says no goodbye.
type proxy struct {
	ln     net.Listener
	target string
	bytes  *atomic.Int64

	mu     sync.Mutex
	conns  []net.Conn
	killed bool
}

func newProxy(target string, bytes *atomic.Int64) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, bytes: bytes}
	go p.accept()
	return p, nil
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.killed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.bytes.Add(int64(n))
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

// Kill cuts the client off for good.
func (p *proxy) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.killed = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
}

// cpuSeconds reads utime+stime of a process from /proc/<pid>/stat.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// Fields after the comm: state is f[0]; utime and stime are fields 14
	// and 15 of the line, f[11] and f[12] here.
	ut, err := strconv.ParseFloat(f[11], 64)
	if err != nil {
		return 0, err
	}
	st, err := strconv.ParseFloat(f[12], 64)
	if err != nil {
		return 0, err
	}
	return (ut + st) / clockTicks, nil
}

const clockTicks = 100 // sysconf(_SC_CLK_TCK) on Linux
