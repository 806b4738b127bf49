"""The typed helpers of keyhole.Client: one method per operation of PROTOCOL.md section 7.

Part of the Python client (copy it with keyhole.py). Each helper names its operation's arguments,
leaves out those given as None, and returns the operation's result as keyhole.Client.call does.
"""


def _args(**members):
    """The members that are not None."""
    return {name: value for name, value in members.items() if value is not None}


class Operations:
    """Mixed into keyhole.Client, which provides call(op, args)."""

    def ping(self):
        """Return {"protocol": 1, "version": ..., "uptime_ms": ...}."""
        return self.call("ping")

    def stats(self):
        """Return keyholed's counters (connections, requests, in_flight, errors, bytes, uptime_ms, store)."""
        return self.call("stats")

    def verify_token(self, token, issuer=None, audience=None, nonce=None):
        """Verify an identity token (a JWT); return {issuer, sub, aud, exp, iat, claims, ...}.

        Raises KeyholeError with a token_* code (or keys_unavailable) when it does not verify.
        """
        args = {"token": token}
        for name, value in (("issuer", issuer), ("audience", audience), ("nonce", nonce)):
            if value is not None:
                args[name] = value
        return self.call("token.verify", args)

    def jwks_status(self, issuer=None):
        """Return each issuer's key-set status: kids, fetched_at, expires_at, last_error, counts."""
        return self.call("jwks.status", {} if issuer is None else {"issuer": issuer})

    def jwks_refresh(self, issuer=None):
        """Fetch the issuers' key sets now (under keyholed's refetch cool-down); return the outcomes."""
        return self.call("jwks.refresh", {} if issuer is None else {"issuer": issuer})

    def create_session(self, sub, issuer=None, ttl_s=None, idle_s=None, data=None):
        """Create a session; return {"session": token, "id", "expires_at"}. The token is shown only here."""
        return self.call("session.create", _args(sub=sub, issuer=issuer, ttl_s=ttl_s, idle_s=idle_s, data=data))

    def get_session(self, session):
        """The live session `session` (a token) names, with its user; KeyholeError session_not_found if none."""
        return self.call("session.get", {"session": session})

    def revoke_session(self, session=None, id=None):
        """Revoke a session by token or by id; return whether a live one was revoked."""
        if (session is None) == (id is None):
            raise ValueError("give exactly one of session and id")
        args = {"session": session} if session is not None else {"id": id}
        return self.call("session.revoke", args)["revoked"]

    def revoke_all_sessions(self, sub, issuer=None):
        """Revoke every session of a user; return how many were live."""
        return self.call("session.revoke_all", _args(sub=sub, issuer=issuer))["revoked"]

    def list_sessions(self, sub, issuer=None):
        """A user's live sessions (ids and times, never tokens), oldest first."""
        return self.call("session.list", _args(sub=sub, issuer=issuer))["sessions"]

    def get_user(self, sub, issuer=None):
        """A user's record; KeyholeError user_not_found if none."""
        return self.call("user.get", _args(sub=sub, issuer=issuer))

    def update_user(self, sub, issuer=None, **changes):
        """Set `email` and/or `name` ({"given", "family"}); None removes. Returns {"user", "created"}."""
        unknown = set(changes) - {"email", "name"}
        if unknown:
            raise TypeError("unknown user fields: %s" % ", ".join(sorted(unknown)))
        args = _args(sub=sub, issuer=issuer)
        args.update(changes)
        return self.call("user.update", args)

    def delete_user(self, sub, issuer=None):
        """Delete a user's record and every session of theirs; return {"deleted", "sessions_revoked"}."""
        return self.call("user.delete", _args(sub=sub, issuer=issuer))

    def admin_snapshot(self):
        """Snapshot the users and sessions now; return its figures once it is durable.

        The result is {"start_lsn", "sessions", "users", "bytes", "wal_bytes_removed", "created_at",
        "ms", "longest_pause_us"}; the log segments the snapshot covers are deleted by then. A snapshot already being
        taken is waited for, then a fresh one is taken. Raises KeyholeError storage_unavailable
        (retry after retry_after_ms) when storage is failing, keyholed is stopping, or the snapshot
        cannot be written.
        """
        return self.call("admin.snapshot")

    def admin_reload(self):
        """Read keyholed's configuration file again; return {"applied": [...], "needs_restart": [...]}."""
        return self.call("admin.reload")

    def apple_sign_in(self, identity_token, authorization_code=None, client_id=None, nonce=None,
                      user=None, session=None):
        """Sign in with Apple: verify the token, exchange the code, upsert the user, create a session.

        Returns {"created", "user", "session": {"session", "id", "expires_at"}}. Not sent again
        after a lost connection: its code is single use.
        """
        return self.call("apple.sign_in", _args(identity_token=identity_token, authorization_code=authorization_code,
                                                client_id=client_id, nonce=nonce, user=user, session=session))

    def apple_authorize(self, client_id=None, redirect_uri=None, scope=None, return_to=None):
        """Start Sign in with Apple on the web: the URL at Apple and the binding cookie to set first.

        Returns {"url", "state", "expires_at", "cookie": {"name", "value", "max_age", "set_cookie"}}:
        send `cookie["set_cookie"]` as a Set-Cookie header, then redirect the browser to `url`.
        A `return_to` that is not a path on the site (or a URL on a configured origin) is
        KeyholeError bad_request. Not sent again after a lost connection.
        """
        return self.call("apple.authorize", _args(client_id=client_id, redirect_uri=redirect_uri,
                                                  scope=scope, return_to=return_to))

    def apple_callback(self, form, cookie, session=None):
        """Finish Sign in with Apple on the web: check Apple's POST, then sign the user in.

        form: the fields Apple POSTed to the redirect URI, a mapping of strings (a dict, Flask's
        request.form, Django's request.POST, Starlette's await request.form()); cookie: the value of
        the binding cookie named by apple_authorize's cookie["name"], as the browser sent it.
        Returns apple_sign_in's {"created", "user", "session"} and "return_to". A state unknown,
        used or from another browser is KeyholeError state_invalid; Apple's error (the user
        cancelled) is apple_authorization_refused. Not sent again after a lost connection: the
        state and the code are single use.
        """
        return self.call("apple.callback", _args(form=dict(form.items()), cookie=cookie, session=session))

    def apple_notification(self, payload):
        """Apply a server-to-server notification (the JWT Apple POSTed); return {type, sub, applied, duplicate}."""
        return self.call("apple.notification", {"payload": payload})

    def apple_refresh_check(self, sub):
        """Check a user's stored refresh token at Apple now; return {"result": ...}."""
        return self.call("apple.refresh_check", {"sub": sub})

    def apple_transfer_export(self, sub, target_team_id, client_id=None):
        """The transfer identifier for moving a user to another team; return {"transfer_sub"}."""
        return self.call("apple.transfer.export", _args(sub=sub, target_team_id=target_team_id, client_id=client_id))

    def apple_transfer_import(self, transfer_sub, client_id=None):
        """Move a transferred user to their new sub; return {"sub", "moved", "sessions_moved", ...}."""
        return self.call("apple.transfer.import", _args(transfer_sub=transfer_sub, client_id=client_id))

    def apple_pending(self):
        """The revocations at Apple still owed for deleted users: {"count", "pending": [...]}."""
        return self.call("apple.pending")
