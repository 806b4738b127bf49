package keyhole

// Operation is one operation of PROTOCOL.md section 7, as Protocol/ops.json lists it.
type Operation struct {
	Op           string
	Group        string // "" for ping, which anyone may use
	SafeToRepeat bool   // may be sent again after the connection dropped with it unanswered
	Debug        bool   // offered only by a keyholed run with --enable-debug-ops
}

// Operations returns this client's copy of Protocol/ops.json, in its order (a test checks that they
// are the same).
func Operations() []Operation {
	return append([]Operation(nil), operations...)
}

var operations = []Operation{
	{"ping", "", true, false},
	{"stats", "admin", true, false},
	{"token.verify", "verify", true, false},
	{"jwks.status", "verify", true, false},
	{"jwks.refresh", "admin", false, false},
	{"session.create", "session", false, false},
	{"session.get", "session", true, false},
	{"session.revoke", "session", true, false},
	{"session.revoke_all", "session", false, false},
	{"session.list", "session", true, false},
	{"user.get", "session", true, false},
	{"user.update", "admin", false, false},
	{"user.delete", "admin", false, false},
	{"apple.sign_in", "signin", false, false},
	{"apple.notification", "signin", false, false},
	{"apple.refresh_check", "admin", false, false},
	{"apple.transfer.export", "admin", false, false},
	{"apple.transfer.import", "admin", false, false},
	{"apple.pending", "admin", true, false},
	{"apple.authorize", "signin", false, false},
	{"apple.callback", "signin", false, false},
	{"admin.snapshot", "admin", false, false},
	{"admin.reload", "admin", false, false},
	{"debug.sleep", "admin", true, true},
	{"debug.echo", "admin", true, true},
	{"debug.block", "admin", false, true},
	{"debug.advance_clock", "admin", false, true},
}

var safeToRepeat = func() map[string]bool {
	m := make(map[string]bool, len(operations))
	for _, o := range operations {
		m[o.Op] = o.SafeToRepeat
	}
	return m
}()

// SafeToRepeat reports whether op may be sent again after its connection was lost with it written
// but unanswered. An operation this client does not know is not.
func SafeToRepeat(op string) bool { return safeToRepeat[op] }
