package lookup

// ManagerError returns why the Lookup's last attempt to open its sync
// stream failed, or nil once a stream to the Manager works (and before the
// first attempt ends). The error names the replica's address and the cause
// in a few words: the dial error ("connect: connection refused"), the TLS
// handshake's (a certificate signed by another CA), or the Manager's
// refusal (status.Code says PermissionDenied or Unauthenticated). A client
// that cannot route because its copy of the table is empty should say
// this rather than that the table is empty.
func (l *Lookup) ManagerError() error { return l.managers.LastError() }
