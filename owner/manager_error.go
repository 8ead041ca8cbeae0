package owner

// ManagerError returns why the Owner's last attempt to open its lease
// stream failed, or nil once a stream to the Manager works (and before the
// first attempt ends). The error names the replica's address and the cause
// in a few words: the dial error ("connect: connection refused"), the TLS
// handshake's (a certificate signed by another CA), or the Manager's
// refusal; status.Code reports its gRPC code, PermissionDenied or
// Unauthenticated for a refusal of this Owner's certificate or namespace,
// which retrying does not lift. The Owner keeps retrying regardless; a
// server may log this, or give up on a refusal.
func (o *Owner) ManagerError() error { return o.managers.LastError() }
