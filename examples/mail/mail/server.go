package mail

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	stdmaps "maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/certs"
	"github.com/leasehold/leasehold/keyspace"
	"github.com/leasehold/leasehold/owner"
	"github.com/leasehold/leasehold/protocol"
)

// Limits and timings.
const (
	MaxMessageBytes = 1 << 20                // a larger delivery is answered 413
	Spread          = 2                      // Porcupine's soft bound on a user's fragment nodes
	nodeWait        = 2 * time.Second        // one request to another node
	retryNodes      = 500 * time.Millisecond // a node not heard from is asked again
	downFor         = 2 * time.Second        // a node that failed is skipped this long
)

// ServerConfig configures a Server. Nodes maps every node's (Owner) ID to
// its address, this one's included. All but Namespace, Timing and Logger
// are required.
type ServerConfig struct {
	Manager, Namespace, ID, Listen, DataDir string
	Nodes                                   map[string]string
	Timing                                  protocol.Timing
	Logger                                  *slog.Logger
	// CertsDir (leasehold cert): the Owner, the HTTPS server and the calls
	// to other nodes use owner.<ID>.crt; /internal/... answers only the
	// nodes. Insecure, without it, is plaintext throughout. One of the two
	// is required: plaintext is only ever chosen explicitly.
	CertsDir string
	Insecure bool
}

// Server is a mail node: it stores fragments, and owns its leased users' mail maps.
type Server struct {
	cfg     ServerConfig
	lis     net.Listener
	http    *http.Server
	peers   *http.Client
	certs   *certs.Source // nil: plain HTTP
	scheme  string        // of the other nodes' URLs
	owner   *owner.Owner
	disk    *disk
	maps    *maps
	stopped chan struct{}
	wake    chan struct{} // a rebuild has work
	wg      sync.WaitGroup
	close   sync.Once
	err     error

	mu       sync.Mutex           // guards the three maps below, per node:
	inflight map[string]int       // this server's requests under way
	reported map[string]int       // pending disk operations, as the node last said
	down     map[string]time.Time // until when to skip it, after it failed
}

// NewServer opens DataDir, listens, starts an Owner, and serves until Close.
func NewServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	if cfg.Manager == "" || cfg.ID == "" || cfg.Listen == "" || cfg.DataDir == "" {
		return nil, errors.New("mail: ServerConfig.Manager, ID, Listen and DataDir are required")
	}
	if cfg.CertsDir == "" && !cfg.Insecure {
		return nil, errors.New("mail: set ServerConfig.CertsDir to serve and dial with mutual TLS, or Insecure: true for plaintext")
	}
	if _, ok := cfg.Nodes[cfg.ID]; !ok {
		return nil, fmt.Errorf("mail: ServerConfig.Nodes does not name this node, %q", cfg.ID)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	src, err := certs.OpenIfSet(cfg.CertsDir, certs.Owner, cfg.ID)
	if err != nil {
		return nil, fmt.Errorf("mail: %w", err)
	}
	d, err := openDisk(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("mail: %w", err)
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("mail: %w", err)
	}
	t, scheme := certs.DialHTTP(src, certs.Owner)
	t.MaxIdleConnsPerHost = 64
	s := &Server{cfg: cfg, lis: lis, disk: d, peers: &http.Client{Transport: t, Timeout: nodeWait}, certs: src, scheme: scheme,
		stopped: make(chan struct{}), wake: make(chan struct{}, 1),
		inflight: map[string]int{}, reported: map[string]int{}, down: map[string]time.Time{}}
	nodes := slices.Sorted(stdmaps.Keys(cfg.Nodes))
	ready := make(chan struct{})
	// Duty: a unique ID per server (the node's). No Handovers: the mail map
	// is rebuilt from the disks by the next Owner.
	o, err := owner.New(ctx, owner.Config{
		Connection: leasehold.Connection{
			Manager:   cfg.Manager,
			Namespace: cfg.Namespace,
			Timing:    cfg.Timing,
			Logger:    cfg.Logger,
			CertsDir:  cfg.CertsDir,
			Insecure:  cfg.Insecure,
		},
		ID:   cfg.ID,
		Addr: cfg.Nodes[cfg.ID],
		OnChange: func(ch owner.OwnershipChange) {
			<-ready
			s.maps.changed(ch)
			select { // wake the rebuilder
			case s.wake <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("mail: %w", err)
	}
	s.owner, s.maps = o, newMaps(o, nodes)
	close(ready)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /mail/{user}", s.handleDeliver)
	mux.HandleFunc("GET /mail/{user}", s.handleRead)
	mux.HandleFunc("POST /internal/store/{user}", s.nodesOnly(s.handleStore))
	mux.HandleFunc("GET /internal/fetch/{user}", s.nodesOnly(s.handleFetch))
	mux.HandleFunc("GET /internal/users", s.nodesOnly(s.handleUsers))
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	go certs.ServeHTTP(s.http, lis, src)
	s.wg.Go(s.rebuilder)
	return s, nil
}

// nodesOnly admits, with certificates, only the nodes (Owners of this
// namespace named in Nodes) to the storage endpoints: no frontend or other
// service may store fragments or read the disks. Every answer carries the
// node's load.
func (s *Server) nodesOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Pending", strconv.FormatInt(s.disk.pending.Load(), 10))
		if s.certs != nil {
			ns := cmp.Or(s.cfg.Namespace, "default")
			id, ok := certs.FromHTTP(r)
			if _, node := s.cfg.Nodes[id.Name]; !ok || id.Role != certs.Owner || !id.MayUse(ns) || !node {
				http.Error(w, fmt.Sprintf("mail: %s may not use the storage endpoints in namespace %q: only the nodes may", id, ns), http.StatusForbidden)
				return
			}
		}
		h(w, r)
	}
}

// Addr is the listen address.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Rebuilds returns the rebuilds of the mail maps of the ranges held now.
func (s *Server) Rebuilds() []Rebuild { return s.maps.rebuilds() }

// Close hands the ranges back (their next Owners rebuild the mail maps from
// the disks) and stops serving. The fragments stay on disk.
func (s *Server) Close(ctx context.Context) error {
	s.close.Do(func() {
		if err := s.owner.Close(ctx); err != nil {
			s.err = fmt.Errorf("mail: close %s: %w", s.cfg.ID, err)
		}
		close(s.stopped)
		s.wg.Wait()
		s.http.Close()
		s.peers.CloseIdleConnections()
	})
	return s.err
}

// rebuilder asks every node which users of a granted range it holds
// (Porcupine's disk scan), and asks again those that did not answer.
func (s *Server) rebuilder() {
	tick := time.NewTicker(retryNodes / 2)
	defer tick.Stop()
	for {
		select {
		case <-s.stopped:
			return
		case <-s.wake:
		case <-tick.C:
		}
		var wg sync.WaitGroup
		for l, nodes := range s.maps.work(retryNodes) {
			for _, node := range nodes {
				wg.Go(func() {
					users, err := s.usersAt(node, l.r)
					s.maps.merge(l, node, users, err)
				})
			}
		}
		wg.Wait()
	}
}

// usersAt asks node which users in r it holds fragments for.
func (s *Server) usersAt(node string, r keyspace.Range) ([]string, error) {
	if node == s.cfg.ID {
		return s.disk.usersIn(r), nil
	}
	var users []string
	err := s.call(node, http.MethodGet, fmt.Sprintf("/internal/users?start=%d&end=%d", r.Start, r.End), nil, &users)
	return users, err
}

// call sends one request to node and decodes its JSON answer into out.
func (s *Server) call(node, method, path string, body io.Reader, out any) error {
	s.mu.Lock()
	s.inflight[node]++
	s.mu.Unlock()
	req, err := http.NewRequest(method, s.scheme+"://"+s.cfg.Nodes[node]+path, body)
	var resp *http.Response
	if err == nil {
		resp, err = s.peers.Do(req)
	}
	if err == nil {
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
			err = fmt.Errorf("%s answered %s: %s", node, resp.Status, strings.TrimSpace(string(msg)))
		} else if out != nil {
			err = json.NewDecoder(resp.Body).Decode(out)
		}
	}
	s.mu.Lock()
	s.inflight[node]--
	if resp != nil { // Porcupine's load, piggybacked on every answer
		s.reported[node], _ = strconv.Atoi(resp.Header.Get("X-Pending"))
	}
	if err != nil {
		s.down[node] = time.Now().Add(downFor)
	}
	s.mu.Unlock()
	return err
}

// candidates orders a delivery's nodes: the user's fragment nodes, topped
// up with random others to Spread, by load; then every other node.
func (s *Server) candidates(holding []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	load := func(n string) int {
		if now.Before(s.down[n]) {
			return 1 << 30
		}
		return s.inflight[n] + s.reported[n]
	}
	first := slices.Clone(holding)
	var rest []string
	for _, n := range s.maps.nodes {
		if !slices.Contains(holding, n) {
			rest = append(rest, n)
		}
	}
	rand.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	for len(first) < Spread && len(rest) > 0 {
		first, rest = append(first, rest[0]), rest[1:]
	}
	slices.SortStableFunc(first, func(a, b string) int { return load(a) - load(b) })
	return append(first, rest...)
}

// fail answers an error; refusals follow owner.Refuse: a range being
// rebuilt is moving (503), a key not held is not-owner (421).
func (s *Server) fail(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errRebuilding):
		owner.Refuse(w, owner.RefusedMoving, err.Error())
	case errors.Is(err, errNotOwner), errors.Is(err, errLeaseLost):
		owner.Refuse(w, owner.RefusedNotOwner, err.Error())
	default:
		http.Error(w, err.Error(), http.StatusBadGateway)
	}
}

// handleDeliver serves POST /mail/{user}?id=ID: the five steps, the message
// stored durably on one node between (2) and (3).
func (s *Server) handleDeliver(w http.ResponseWriter, r *http.Request) {
	user, id := r.PathValue("user"), r.URL.Query().Get("id")
	if id == "" || len(id) > 256 {
		http.Error(w, "id (the message's ID, at most 256 bytes) is required", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxMessageBytes))
	if err != nil {
		http.Error(w, fmt.Sprintf("reading the message (at most %d bytes): %v", MaxMessageBytes, err), http.StatusRequestEntityTooLarge)
		return
	}
	n, holding, _, err := s.maps.lookup(user) // (1), (2): the duties are in maps.lookup
	if err != nil {
		s.fail(w, err)
		return
	}
	m, _ := json.Marshal(Message{ID: id, Body: string(body)})
	stored := ""
	for _, node := range s.candidates(holding) {
		if node == s.cfg.ID {
			err = s.disk.store(user, Message{ID: id, Body: string(body), At: time.Now()})
		} else {
			err = s.call(node, http.MethodPost, "/internal/store/"+url.PathEscape(user), bytes.NewReader(m), nil)
		}
		if err == nil {
			stored = node
			break
		}
	}
	if stored == "" {
		s.fail(w, fmt.Errorf("no node could store the message; the last: %w", err))
		return
	}
	if err := s.maps.added(user, stored, n); err != nil { // (3), (4): CheckLeaseContinuous in maps.added
		s.fail(w, err) // the copy stored is an orphan; reads drop duplicates
		return
	}
	w.Header().Set("X-Node", stored)
	w.WriteHeader(http.StatusNoContent) // (5)
}

// Mailbox answers a read: the messages, oldest first, each once, and the
// nodes that may hold more but could not be read.
type Mailbox struct {
	User       string    `json:"user"`
	Messages   []Message `json:"messages"`
	Incomplete []string  `json:"incomplete"`
}

// handleRead serves GET /mail/{user}: it gathers the mail map's fragments.
func (s *Server) handleRead(w http.ResponseWriter, r *http.Request) {
	user := r.PathValue("user")
	n, holding, unknown, err := s.maps.lookup(user) // (1), (2): the duties are in maps.lookup
	if err != nil {
		s.fail(w, err)
		return
	}
	box := Mailbox{User: user, Messages: []Message{}, Incomplete: append([]string{}, unknown...)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	seen := map[string]bool{}
	for _, node := range holding { // (3) gather
		wg.Go(func() {
			var ms []Message
			var err error
			if node == s.cfg.ID {
				ms, err = s.disk.fetch(user)
			} else {
				err = s.call(node, http.MethodGet, "/internal/fetch/"+url.PathEscape(user), nil, &ms)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				box.Incomplete = append(box.Incomplete, node)
			}
			for _, m := range ms {
				if !seen[m.ID] { // a retried delivery may have left a copy on two nodes
					seen[m.ID] = true
					box.Messages = append(box.Messages, m)
				}
			}
		})
	}
	wg.Wait()
	slices.SortFunc(box.Messages, func(a, b Message) int {
		return cmp.Or(a.At.Compare(b.At), strings.Compare(a.ID, b.ID))
	})
	slices.Sort(box.Incomplete)
	// Duty: CheckLeaseContinuous before anything leaves the server — (4):
	// the map the read gathered by was the lease's throughout.
	if !s.owner.CheckLeaseContinuous(keyspace.KeyOf(user), n) {
		s.fail(w, errLeaseLost)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(box) // (5)
}

func (s *Server) handleStore(w http.ResponseWriter, r *http.Request) {
	var m Message
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 2*MaxMessageBytes)).Decode(&m); err != nil || m.ID == "" {
		http.Error(w, fmt.Sprintf("store: a JSON message with an id is required (%v)", err), http.StatusBadRequest)
		return
	}
	m.At = time.Now()
	if err := s.disk.store(r.PathValue("user"), m); err != nil {
		http.Error(w, "store: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleFetch(w http.ResponseWriter, r *http.Request) {
	ms, err := s.disk.fetch(r.PathValue("user"))
	if err != nil {
		http.Error(w, "fetch: "+err.Error(), http.StatusInternalServerError)
		return
	}
	json.NewEncoder(w).Encode(append([]Message{}, ms...))
}

func (s *Server) handleUsers(w http.ResponseWriter, r *http.Request) {
	start, err1 := strconv.ParseUint(r.URL.Query().Get("start"), 10, 64)
	end, err2 := strconv.ParseUint(r.URL.Query().Get("end"), 10, 64)
	rg := keyspace.Range{Start: keyspace.Key(start), End: keyspace.Key(end)}
	if err1 != nil || err2 != nil || !rg.Valid() {
		http.Error(w, "users: start and end (decimal keys, end 0 for the end of the key space) make no range", http.StatusBadRequest)
		return
	}
	json.NewEncoder(w).Encode(append([]string{}, s.disk.usersIn(rg)...))
}
