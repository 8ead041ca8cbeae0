package certs

import (
	"flag"
	"os"
)

// InsecureEnv is the environment variable that chooses plaintext ("1" or
// "true"), as --insecure does.
const InsecureEnv = "LEASEHOLD_INSECURE"

// Flags are a command's --certs-dir and --insecure (AddFlags).
type Flags struct {
	fs       *flag.FlagSet
	dir      *string
	insecure *bool
}

// AddFlags adds --certs-dir (into dir; default $LEASEHOLD_CERTS_DIR) and
// --insecure (into insecure; default set by $LEASEHOLD_INSECURE) to fs, for
// a command that serves or dials with the certificates of a directory, or
// in plaintext when asked for it explicitly. what says what the
// certificates are used for. Call Chosen after fs.Parse.
func AddFlags(fs *flag.FlagSet, dir *string, insecure *bool, what string) *Flags {
	fs.StringVar(dir, "certs-dir", os.Getenv(DirEnv), "the certificates directory (leasehold cert): "+what+" ($"+DirEnv+")")
	v := os.Getenv(InsecureEnv)
	fs.BoolVar(insecure, "insecure", v == "1" || v == "true", "plaintext, without certificates ($"+InsecureEnv+"=1 sets it)")
	return &Flags{fs: fs, dir: dir, insecure: insecure}
}

// Chosen settles the parsed flags to a certificates directory (insecure
// false) or plaintext (dir empty), and reports whether either was chosen:
// false means neither, and the command should say that one is required. A flag wins over the environment: --certs-dir
// over $LEASEHOLD_INSECURE, --insecure over $LEASEHOLD_CERTS_DIR; with
// both flags, plaintext.
func (f *Flags) Chosen() bool {
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if *f.insecure = *f.insecure && (set["insecure"] || !set["certs-dir"]); *f.insecure {
		*f.dir = ""
	}
	return *f.insecure || *f.dir != ""
}
