package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/certs"
)

func init() { register(newCertCommand) }

// certOptions are the flags every cert subcommand shares.
type certOptions struct {
	dir       string
	caKey     string
	lifetime  time.Duration
	overwrite bool
}

func (o *certOptions) addFlags(cmd *cobra.Command, e *env, lifetime time.Duration) {
	f := cmd.Flags()
	f.StringVar(&o.dir, "certs-dir", e.getenv(certs.DirEnv), "the certificates `DIR` ($"+certs.DirEnv+" sets the default)")
	f.StringVar(&o.caKey, "ca-key", "", "the CA's key `FILE` (default: ca.key in the certificates directory)")
	f.DurationVar(&o.lifetime, "lifetime", lifetime, "how long the certificate is valid")
}

func (o *certOptions) check() error {
	if o.dir == "" {
		return usagef("no certificates directory: pass --certs-dir DIR or set $%s", certs.DirEnv)
	}
	if o.lifetime <= 0 {
		return usagef("--lifetime %s must be positive", o.lifetime)
	}
	if o.caKey == "" {
		o.caKey = filepath.Join(o.dir, certs.CAKeyFile)
	}
	return nil
}

// create issues a certificate for id and says where it went.
func (o *certOptions) create(e *env, id certs.Identity, hosts []string) error {
	if err := o.check(); err != nil {
		return err
	}
	if err := id.Validate(); err != nil {
		return usageError(err)
	}
	ca, err := certs.LoadCA(filepath.Join(o.dir, certs.CAFile), o.caKey)
	if err != nil {
		return err
	}
	path, err := certs.Create(o.dir, ca, id, hosts, o.lifetime)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s: %s, valid for %s\n", path, id, o.lifetime)
	return nil
}

func newCertCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Create the CA and the certificates of a leasehold group",
		Long: `Create the certificate authority (CA) of a leasehold group and the certificates
of its members, in a certificates directory that every command finds through
--certs-dir or $` + certs.DirEnv + `.

Each certificate carries its holder's role and name (URI SANs
leasehold://ROLE/NAME, and leasehold://namespace/NS for each namespace): a
replica of the Manager (its Raft ID), an Owner (its ID and the namespaces it
may hold leases in), a Lookup, or an operator. The Manager admits each call
by that identity (docs/security.md).

Run create-ca once, keep ca.key somewhere safe (--ca-key), copy ca.crt and each
process's own .crt and .key to it. Creating a certificate again replaces it;
running processes load the new one without a restart.`,
		Example: `  leasehold cert create-ca --certs-dir certs
  leasehold cert create-replica 1 127.0.0.1 localhost --certs-dir certs
  leasehold cert create-owner kv-1 --namespace default 127.0.0.1 --certs-dir certs
  leasehold cert create-lookup --certs-dir certs
  leasehold cert create-operator alice --certs-dir certs
  leasehold cert list --certs-dir certs`,
		Args: cobra.NoArgs,
	}

	var ca certOptions
	createCA := &cobra.Command{
		Use:   "create-ca",
		Short: "Create the CA: ca.crt, which every member trusts, and its key",
		Args:  cobra.NoArgs,
		RunE: run(func(_ context.Context, _ []string) error {
			if err := ca.check(); err != nil {
				return err
			}
			if _, err := certs.CreateCA(ca.dir, ca.caKey, ca.lifetime, ca.overwrite); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "wrote %s and %s\n", filepath.Join(ca.dir, certs.CAFile), ca.caKey)
			return nil
		}),
	}
	ca.addFlags(createCA, e, certs.DefaultCALifetime)
	createCA.Flags().BoolVar(&ca.overwrite, "overwrite", false, "replace an existing CA (every certificate must then be created again)")

	var rep certOptions
	createReplica := &cobra.Command{
		Use:   "create-replica ID HOST...",
		Short: "Create the certificate of Manager replica ID, serving at the HOSTs (names or IP addresses)",
		Args:  cobra.MinimumNArgs(2),
		RunE: run(func(_ context.Context, args []string) error {
			return rep.create(e, certs.Identity{Role: certs.Replica, Name: args[0]}, args[1:])
		}),
	}
	rep.addFlags(createReplica, e, certs.DefaultCertLifetime)

	var own certOptions
	var namespaces []string
	createOwner := &cobra.Command{
		Use:   "create-owner ID --namespace NS [HOST...]",
		Short: "Create the certificate of Owner ID, which may hold leases in the namespaces named, serving frontends at the HOSTs",
		Args:  cobra.MinimumNArgs(1),
		RunE: run(func(_ context.Context, args []string) error {
			if len(namespaces) == 0 {
				return usagef("an owner needs at least one --namespace")
			}
			return own.create(e, certs.Identity{Role: certs.Owner, Name: args[0], Namespaces: namespaces}, args[1:])
		}),
	}
	own.addFlags(createOwner, e, certs.DefaultCertLifetime)
	createOwner.Flags().StringArrayVar(&namespaces, "namespace", nil, "a namespace `NS` the Owner may hold leases in (repeatable)")

	var lk certOptions
	var lkNamespaces []string
	createLookup := &cobra.Command{
		Use:   "create-lookup [NAME [HOST...]]",
		Short: "Create a Lookup's certificate: it may follow the lease table and read the status; HOSTs name where it serves (a gateway, a dashboard)",
		Args:  cobra.ArbitraryArgs,
		RunE: run(func(_ context.Context, args []string) error {
			name := "lookup"
			if len(args) >= 1 {
				name = args[0]
			}
			var hosts []string
			if len(args) > 1 {
				hosts = args[1:]
			}
			return lk.create(e, certs.Identity{Role: certs.Lookup, Name: name, Namespaces: lkNamespaces}, hosts)
		}),
	}
	lk.addFlags(createLookup, e, certs.DefaultCertLifetime)
	createLookup.Flags().StringArrayVar(&lkNamespaces, "namespace", nil, "a namespace `NS` it may follow (repeatable; default: every namespace)")

	var op certOptions
	createOperator := &cobra.Command{
		Use:   "create-operator NAME [HOST...]",
		Short: "Create an operator's certificate: status, drain, cluster add and remove, backup; HOSTs name where it serves (a dashboard)",
		Args:  cobra.MinimumNArgs(1),
		RunE: run(func(_ context.Context, args []string) error {
			return op.create(e, certs.Identity{Role: certs.Operator, Name: args[0]}, args[1:])
		}),
	}
	op.addFlags(createOperator, e, certs.DefaultCertLifetime)

	var ls certOptions
	list := &cobra.Command{
		Use:   "list",
		Short: "List the certificates in the directory with their identities and expiry",
		Args:  cobra.NoArgs,
		RunE: run(func(_ context.Context, _ []string) error {
			if ls.dir == "" {
				return usagef("no certificates directory: pass --certs-dir DIR or set $%s", certs.DirEnv)
			}
			return listCerts(e, ls.dir)
		}),
	}
	list.Flags().StringVar(&ls.dir, "certs-dir", e.getenv(certs.DirEnv), "the certificates `DIR`")

	cmd.AddCommand(createCA, createReplica, createOwner, createLookup, createOperator, list, newExportP12Command(e)) // cert_p12.go
	return cmd
}

// listCerts prints one line per certificate in dir.
func listCerts(e *env, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.crt"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no certificate in %s", dir)
	}
	sort.Strings(files)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tIDENTITY\tHOSTS\tEXPIRES")
	for _, f := range files {
		cs, err := certs.ReadCertificates(f)
		if err != nil {
			fmt.Fprintf(tw, "%s\t%v\t\t\n", filepath.Base(f), err)
			continue
		}
		for _, c := range cs {
			who := "CA " + c.Subject.CommonName
			if !c.IsCA {
				if id, err := certs.IdentityOf(c); err == nil {
					who = id.String()
				} else {
					who = err.Error()
				}
			}
			hosts := append([]string{}, c.DNSNames...)
			for _, ip := range c.IPAddresses {
				hosts = append(hosts, ip.String())
			}
			exp := c.NotAfter.UTC().Format(time.RFC3339)
			if time.Now().After(c.NotAfter) {
				exp += " (EXPIRED)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", filepath.Base(f), who, strings.Join(hosts, ","), exp)
		}
	}
	return tw.Flush()
}
