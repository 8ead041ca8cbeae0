package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
)

// Limits and defaults (docs/gateway.md).
const (
	// DefaultMaxKeyBytes bounds a key's length, in bytes, before hashing:
	// a longer key is answered 400. It keeps a client from making the
	// gateway hash, log or echo megabytes.
	DefaultMaxKeyBytes = 1024
	// DefaultMaxBodyBytes bounds a request body: the gateway holds the
	// body in memory so that it can send it again after a refusal. A
	// larger body is answered 413.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultTimeout is a request's deadline when its route sets none:
	// every attempt and every retry happen within it, and an Owner that
	// has not answered by then is answered for with 504.
	DefaultTimeout = 10 * time.Second
	// DefaultMaxInFlight and DefaultMaxQueue bound each namespace's
	// requests in flight to Owners and those waiting for a slot.
	DefaultMaxInFlight = 512
	DefaultMaxQueue    = 1024
	// DefaultOwnerInFlight bounds the requests in flight to one Owner, so
	// one slow Owner cannot take all of a namespace's slots.
	DefaultOwnerInFlight = 256
)

// Classes are the priority classes, lowest first: under overload the lower
// classes are shed first (Ninja's prioritized admission control).
var Classes = classNames[:]

// PriorityHeader, on a request, asks for a priority class no higher than
// the route's (a client may lower its priority, never raise it).
const PriorityHeader = "Leasehold-Priority"

// Route maps requests to a namespace and says where their key is.
type Route struct {
	// Name names the route in metrics and errors; default: the prefix.
	Name string `json:"name"`
	// Host, if set, must equal the request's host (without the port).
	Host string `json:"host"`
	// Prefix is the path prefix the route serves ("/kv/"); the longest
	// matching prefix wins. Default "/".
	Prefix string `json:"prefix"`
	// Namespace is the key space; default "default".
	Namespace string `json:"namespace"`
	// Key says where the key is: "path:N" (the Nth segment of the path,
	// from 0, URL-unescaped), "header:NAME" or "query:NAME".
	Key string `json:"key"`
	// Priority is the route's class: low, normal (default) or high.
	Priority string `json:"priority"`
	// Timeout is each request's deadline; default DefaultTimeout.
	Timeout Duration `json:"timeout"`

	keyFrom  string // path, header or query
	keyName  string // the header or query parameter
	keyIndex int    // the path segment
	class    int    // index into Classes
}

// Duration is a time.Duration written "250ms" or "10s" in a config file.
type Duration time.Duration

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration such as \"10s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// FileConfig is the gateway's config file: JSON, {"routes": [...]}.
type FileConfig struct {
	Routes []Route `json:"routes"`
}

// LoadRoutes reads routes from a JSON config file.
func LoadRoutes(path string) ([]Route, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var fc FileConfig
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return fc.Routes, nil
}

// ParseRoute reads a route from its flag form, comma-separated key=value
// pairs: "name=kv,prefix=/kv/,namespace=default,key=path:1,priority=high,timeout=5s".
func ParseRoute(s string) (Route, error) {
	var r Route
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return r, fmt.Errorf("route %q: %q is not key=value", s, kv)
		}
		switch k {
		case "name":
			r.Name = v
		case "host":
			r.Host = v
		case "prefix":
			r.Prefix = v
		case "namespace":
			r.Namespace = v
		case "key":
			r.Key = v
		case "priority":
			r.Priority = v
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil {
				return r, fmt.Errorf("route %q: timeout: %w", s, err)
			}
			r.Timeout = Duration(d)
		default:
			return r, fmt.Errorf("route %q: unknown field %q (want name, host, prefix, namespace, key, priority or timeout)", s, k)
		}
	}
	return r, nil
}

// normalize fills the defaults and checks the route.
func (r *Route) normalize() error {
	if r.Prefix == "" {
		r.Prefix = "/"
	}
	if !strings.HasPrefix(r.Prefix, "/") {
		return fmt.Errorf("route %q: prefix %q must start with /", r.Name, r.Prefix)
	}
	if r.Name == "" {
		r.Name = r.Host + r.Prefix
	}
	if r.Namespace == "" {
		r.Namespace = "default"
	}
	if r.Timeout < 0 {
		return fmt.Errorf("route %q: timeout %s must be positive", r.Name, time.Duration(r.Timeout))
	}
	if r.Timeout == 0 {
		r.Timeout = Duration(DefaultTimeout)
	}
	if r.Priority == "" {
		r.Priority = "normal"
	}
	r.class = classOf(r.Priority)
	if r.class < 0 {
		return fmt.Errorf("route %q: priority %q: want one of %s", r.Name, r.Priority, strings.Join(Classes, ", "))
	}
	from, name, ok := strings.Cut(r.Key, ":")
	if !ok || name == "" {
		return fmt.Errorf("route %q: key %q: want path:N, header:NAME or query:NAME", r.Name, r.Key)
	}
	r.keyFrom, r.keyName = from, name
	switch from {
	case "path":
		n, err := strconv.Atoi(name)
		if err != nil || n < 0 {
			return fmt.Errorf("route %q: key %q: the path segment must be a number from 0", r.Name, r.Key)
		}
		r.keyIndex = n
	case "header":
		r.keyName = http.CanonicalHeaderKey(name)
	case "query":
	default:
		return fmt.Errorf("route %q: key %q: want path:N, header:NAME or query:NAME", r.Name, r.Key)
	}
	for _, p := range reservedPaths { // served first: a route there would see no request
		if strings.HasPrefix(r.Prefix, p) {
			return fmt.Errorf("route %q: prefix %q is the gateway's own", r.Name, r.Prefix)
		}
	}
	return nil
}

// Validate reports a Config that New would refuse, as a
// *leasehold.ConfigError naming the field: no routes, a route that does not
// parse (Routes[i], with the route's own error) or repeats another's host
// and prefix, no Manager, a negative limit, a webhook that is not an
// http(s) URL; or no TLS setting (neither Certs nor Insecure). It checks a
// copy with the defaults New fills in, and changes nothing of c's.
func (c Config) Validate() error {
	return c.normalize()
}

// normalize fills in the defaults and checks c (Validate). Its routes are
// a copy of the caller's, normalized.
func (c *Config) normalize() error {
	bad := func(field, why string, args ...any) error {
		return &leasehold.ConfigError{Package: "gateway", Field: field, Why: fmt.Sprintf(why, args...)}
	}
	if len(c.Routes) == 0 {
		return bad("Routes", "is empty: a gateway needs at least one route")
	}
	if c.Manager == "" && c.NewRouter == nil {
		return bad("Manager", "is required")
	}
	if c.Certs == nil && !c.Insecure {
		return errors.New("gateway: no TLS setting: set Config.Certs for mutual TLS to the Manager and the Owners, or Config.Insecure: true for plaintext")
	}
	for _, l := range []struct {
		v     *int
		def   int
		field string
	}{
		{&c.MaxKeyBytes, DefaultMaxKeyBytes, "MaxKeyBytes"},
		{&c.MaxInFlight, DefaultMaxInFlight, "MaxInFlight"},
		{&c.MaxQueue, DefaultMaxQueue, "MaxQueue"},
		{&c.OwnerInFlight, DefaultOwnerInFlight, "OwnerInFlight"},
	} {
		if *l.v < 0 {
			return bad(l.field, "%d must not be negative", *l.v)
		}
		if *l.v == 0 {
			*l.v = l.def
		}
	}
	if c.MaxBodyBytes < 0 {
		return bad("MaxBodyBytes", "%d must not be negative", c.MaxBodyBytes)
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxCopyAge < 0 {
		return bad("MaxCopyAge", "%s must not be negative", c.MaxCopyAge)
	}
	for i, u := range c.Webhooks {
		if err := checkWebhook(u); err != nil {
			return &leasehold.ConfigError{Package: "gateway", Field: fmt.Sprintf("Webhooks[%d]", i), Err: err}
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Routes = slices.Clone(c.Routes)
	seen := map[string]bool{}
	for i := range c.Routes {
		r := &c.Routes[i]
		if err := r.normalize(); err != nil {
			return &leasehold.ConfigError{Package: "gateway", Field: fmt.Sprintf("Routes[%d]", i), Err: err}
		}
		if seen[r.Host+" "+r.Prefix] {
			return bad(fmt.Sprintf("Routes[%d]", i), "repeats another route's host %q and prefix %q", r.Host, r.Prefix)
		}
		seen[r.Host+" "+r.Prefix] = true
	}
	return nil
}

// classOf returns the index of a class name in Classes, or -1.
func classOf(name string) int {
	for i, c := range Classes {
		if c == name {
			return i
		}
	}
	return -1
}

// keyDesc says where a route takes the key from, for error messages.
func (r *Route) keyDesc() string {
	switch r.keyFrom {
	case "path":
		return fmt.Sprintf("path segment %d", r.keyIndex)
	case "header":
		return "header " + r.keyName
	}
	return "query parameter " + r.keyName
}

// errNoKey is a request without a key.
var errNoKey = errors.New("no key")

// keyOf extracts the request's key.
func (r *Route) keyOf(req *http.Request) (string, error) {
	var k string
	switch r.keyFrom {
	case "path":
		segs := strings.Split(strings.TrimPrefix(req.URL.EscapedPath(), "/"), "/")
		if r.keyIndex < len(segs) {
			u, err := urlUnescape(segs[r.keyIndex])
			if err != nil {
				return "", fmt.Errorf("%s: %w", r.keyDesc(), err)
			}
			k = u
		}
	case "header":
		k = req.Header.Get(r.keyName)
	case "query":
		k = req.URL.Query().Get(r.keyName)
	}
	if k == "" {
		return "", errNoKey
	}
	return k, nil
}
