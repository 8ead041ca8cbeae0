package manager

import (
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	pb "github.com/leasehold/leasehold/proto/leasehold/v1"
)

// TestEveryMethodHasRoles walks every method of every service in the
// leasehold API's descriptors (every file of package leasehold.v1): each
// method of a service the Manager serves must have an entry in
// methodRoles, or every certificate is refused it; each other service
// must be one the Manager does not serve (servedElsewhere); and
// methodRoles names no method that does not exist.
func TestEveryMethodHasRoles(t *testing.T) {
	t.Parallel()
	_ = pb.File_leasehold_v1_leasehold_proto // registers the descriptors
	s, err := NewServer(Config{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	served := g.GetServiceInfo()
	seen := map[string]bool{}
	services := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("leasehold.v1", func(f protoreflect.FileDescriptor) bool {
		for i := range f.Services().Len() {
			svc := f.Services().Get(i)
			services++
			name := string(svc.FullName())
			_, manager := served[name]
			if !manager {
				if !slices.Contains(servedElsewhere, name) {
					t.Errorf("service %s is neither served by the Manager nor listed in servedElsewhere", name)
				}
				continue
			}
			for j := range svc.Methods().Len() {
				m := "/" + name + "/" + string(svc.Methods().Get(j).Name())
				seen[m] = true
				if roles, ok := methodRoles[m]; !ok || len(roles) == 0 {
					t.Errorf("%s has no entry in methodRoles: every certificate is refused it", m)
				}
			}
		}
		return true
	})
	if services < 4 {
		t.Fatalf("found %d services in package leasehold.v1: the descriptors were not walked", services)
	}
	for name := range served {
		if name == "grpc.health.v1.Health" || name == "grpc.reflection.v1.ServerReflection" {
			continue
		}
		found := false
		protoregistry.GlobalFiles.RangeFilesByPackage("leasehold.v1", func(f protoreflect.FileDescriptor) bool {
			found = found || f.Services().ByName(protoreflect.FullName(name).Name()) != nil
			return !found
		})
		if !found {
			t.Errorf("the Manager serves %s, which is not in the leasehold.v1 descriptors this test walks", name)
		}
	}
	for m := range methodRoles {
		if !seen[m] {
			t.Errorf("methodRoles names %s, which the Manager does not serve", m)
		}
	}
}
