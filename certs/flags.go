package certs

import (
	"errors"
	"flag"
	"os"
)

// InsecureEnv is the environment variable that chooses plaintext ("1" or
// "true"), as --insecure does.
const InsecureEnv = "LEASEHOLD_INSECURE"

// Flags are a command's --certs-dir and --insecure (AddFlags).
type Flags struct {
	fs       *flag.FlagSet
	dir      string
	insecure bool
}

// AddFlags adds --certs-dir (default $LEASEHOLD_CERTS_DIR) and --insecure
// (default set by $LEASEHOLD_INSECURE) to fs, for a command that serves or
// dials with the certificates of a directory, or in plaintext when asked
// for it explicitly. what says what the certificates are used for.
func AddFlags(fs *flag.FlagSet, what string) *Flags {
	f := &Flags{fs: fs}
	fs.StringVar(&f.dir, "certs-dir", os.Getenv(DirEnv), "the certificates directory (leasehold cert): "+what+" ($"+DirEnv+")")
	v := os.Getenv(InsecureEnv)
	fs.BoolVar(&f.insecure, "insecure", v == "1" || v == "true", "plaintext, without certificates ($"+InsecureEnv+"=1 sets it)")
	return f
}

// Choice is what the parsed flags chose: a certificates directory, or
// plaintext (insecure), or an error that names both flags if neither was
// set. A flag wins over the environment: --certs-dir over
// $LEASEHOLD_INSECURE, --insecure over $LEASEHOLD_CERTS_DIR; with both
// flags, plaintext.
func (f *Flags) Choice() (dir string, insecure bool, err error) {
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	switch {
	case f.insecure && (set["insecure"] || !set["certs-dir"]):
		return "", true, nil
	case f.dir != "":
		return f.dir, false, nil
	}
	return "", false, errors.New("--certs-dir (or $" + DirEnv + ") is required, or --insecure for plaintext")
}
