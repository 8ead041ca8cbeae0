package manager

import (
	"errors"
	"github.com/leasehold/leasehold"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/protocol"
)

// TestServerShowsNoHandlers: the gRPC handlers live on unexported types, so
// they are no methods of Server.
func TestServerShowsNoHandlers(t *testing.T) {
	t.Parallel()
	for _, m := range []string{"Session", "Sync", "Status", "AddPeer", "RemovePeer", "Drain", "Backup"} {
		if _, ok := reflect.TypeFor[*Server]().MethodByName(m); ok {
			t.Errorf("Server has the handler %s as a method", m)
		}
	}
}

// TestPublicTypesNameNoInternalType: no field of Config, or of what
// Snapshot shows, has a type from an internal package, at any depth.
func TestPublicTypesNameNoInternalType(t *testing.T) {
	t.Parallel()
	seen := map[reflect.Type]bool{}
	var walk func(path string, typ reflect.Type)
	walk = func(path string, typ reflect.Type) {
		if seen[typ] {
			return
		}
		seen[typ] = true
		if strings.Contains(typ.PkgPath(), "/internal/") {
			t.Errorf("%s has the internal type %s.%s", path, typ.PkgPath(), typ.Name())
		}
		switch typ.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			walk(path, typ.Elem())
		case reflect.Struct:
			if strings.HasPrefix(typ.PkgPath(), "google.golang.org/") {
				return // grpc.DialOption's innards
			}
			for f := range typ.Fields() {
				if f.IsExported() {
					walk(path+"."+f.Name, f.Type)
				}
			}
		}
	}
	walk("Config", reflect.TypeFor[Config]())
	walk("Snapshot", reflect.TypeFor[Snapshot]())
}

func TestDefaultNamespaceIsTheReplicas(t *testing.T) {
	t.Parallel()
	if protocol.DefaultNamespace != protocol.DefaultNamespace {
		t.Fatalf("DefaultNamespace %q, the replica serves %q", protocol.DefaultNamespace, protocol.DefaultNamespace)
	}
}

// TestValidateNamesTheField: Config.Validate refuses a bad setting
// with a *leasehold.ConfigError naming its field, and an unsafe timing with one
// whose *protocol.TimingError names the timing's fields.
func TestValidateNamesTheField(t *testing.T) {
	t.Parallel()
	unsafe := protocol.Fast()
	unsafe.Renew = unsafe.OwnerLease
	for _, tc := range []struct {
		cfg    Config
		field  string
		timing []string
	}{
		{Config{Insecure: true, Namespaces: []string{""}}, "Namespaces", nil},
		{Config{Insecure: true, Namespaces: []string{strings.Repeat("n", 1<<20)}}, "Namespaces", nil},
		{Config{Insecure: true, ID: 2, Peers: []Peer{{ID: 1, Addr: "a:1"}}}, "Peers", nil},
		{Config{Insecure: true, Peers: []Peer{{ID: 1, Addr: "a:1"}, {ID: 1, Addr: "b:1"}}}, "Peers", nil},
		{Config{Insecure: true, Timing: unsafe}, "Timing", []string{"Renew", "OwnerLease"}},
		{Config{}, "Certs", nil}, // plaintext only when asked for
	} {
		err := tc.cfg.Validate()
		var fe *leasehold.ConfigError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: Validate() = %v, want a leasehold.ConfigError for %s", tc.cfg, err, tc.field)
			continue
		}
		var te *protocol.TimingError
		if tc.timing != nil && (!errors.As(err, &te) || !slices.Equal(te.Fields, tc.timing) || !errors.Is(err, protocol.ErrUnsafeTiming)) {
			t.Errorf("Validate() = %v, want a TimingError naming %v", err, tc.timing)
		}
	}
	ok := Config{Insecure: true} // else zero: every default
	if err := ok.Validate(); err != nil {
		t.Fatalf("the zero Config with Insecure: %v", err)
	}
	if ok.Timing != protocol.Production() || ok.RaftTick != 100*time.Millisecond || ok.ElectionTicks != 10 || ok.ID != 1 || ok.Epoch == 0 {
		t.Errorf("defaults not filled in: %+v", ok)
	}
}
