# frozen_string_literal: true

module Keyhole
  # Typed helpers, one for every operation of PROTOCOL.md section 7 but the debug ones (use
  # Client#call for those). Each sends its operation with the arguments given (nil ones left out)
  # and answers the result Hash, as Client#call does.
  module Helpers
    # Marks an argument left out, where nil means JSON null (user_update's email and name).
    UNSET = Object.new.freeze
    SESSION_KEY = Encoder::KEYS.fetch("session")
    SESSION_GET = Encoder::HEADS.fetch("session.get")

    # Which helper sends which operation (the tests check that every non-debug operation has one).
    METHODS = {
      "ping" => :ping,
      "stats" => :stats,
      "token.verify" => :verify_token,
      "jwks.status" => :jwks_status,
      "jwks.refresh" => :jwks_refresh,
      "session.create" => :create_session,
      "session.get" => :get_session,
      "session.revoke" => :revoke_session,
      "session.revoke_all" => :revoke_all_sessions,
      "session.list" => :list_sessions,
      "user.get" => :get_user,
      "user.update" => :update_user,
      "user.delete" => :delete_user,
      "apple.sign_in" => :apple_sign_in,
      "apple.notification" => :apple_notification,
      "apple.refresh_check" => :apple_refresh_check,
      "apple.transfer.export" => :apple_transfer_export,
      "apple.transfer.import" => :apple_transfer_import,
      "apple.pending" => :apple_pending,
      "apple.authorize" => :apple_authorize,
      "apple.callback" => :apple_callback,
      "admin.snapshot" => :admin_snapshot,
      "admin.reload" => :admin_reload
    }.freeze

    # {"protocol", "version", "uptime_ms"}
    def ping = call("ping")

    # keyholed's counters (admin group).
    def stats = call("stats")

    # Verifies an identity token (a compact JWS); answers its issuer, sub, aud, ... and claims.
    def verify_token(token, issuer: nil, audience: nil, nonce: nil)
      call("token.verify", compact("token" => token, "issuer" => issuer, "audience" => audience, "nonce" => nonce))
    end

    # Each issuer's key set: kids, fetch times, last error.
    def jwks_status(issuer: nil) = call("jwks.status", compact("issuer" => issuer))

    # Fetches remote key sets now (admin group).
    def jwks_refresh(issuer: nil) = call("jwks.refresh", compact("issuer" => issuer))

    # {"session" => "kh_...", "id", "expires_at"}. Not safe to repeat: after connection_lost the
    # session may or may not exist.
    def create_session(sub, issuer: nil, ttl_s: nil, idle_s: nil, data: nil)
      call("session.create", compact("sub" => sub, "issuer" => issuer, "ttl_s" => ttl_s, "idle_s" => idle_s, "data" => data))
    end

    # The session of a token, with its user (or nil); raises session_not_found for an unknown,
    # expired or revoked one.
    def get_session(session)
      # The check of every web request: a plain token's args are written straight away.
      json = Encoder.string_args(SESSION_KEY, session)
      json ? perform("session.get", SESSION_GET, json) : call("session.get", { "session" => session })
    end

    # Revokes one session, named by its token or its id (exactly one). {"revoked" => bool}
    def revoke_session(session: nil, id: nil)
      raise ArgumentError, "give exactly one of session: and id:" if session.nil? == id.nil?

      call("session.revoke", compact("session" => session, "id" => id))
    end

    # Revokes every session of the user. {"revoked" => n}
    def revoke_all_sessions(sub, issuer: nil) = call("session.revoke_all", compact("sub" => sub, "issuer" => issuer))

    # The user's live sessions, oldest first (never tokens).
    def list_sessions(sub, issuer: nil) = call("session.list", compact("sub" => sub, "issuer" => issuer))

    # The user's record; raises user_not_found when there is none.
    def get_user(sub, issuer: nil) = call("user.get", compact("sub" => sub, "issuer" => issuer))

    # Sets the user's email and/or name (nil removes it; left out: unchanged). Admin group.
    def update_user(sub, issuer: nil, email: UNSET, name: UNSET)
      args = compact("sub" => sub, "issuer" => issuer)
      args["email"] = email unless email.equal?(UNSET)
      args["name"] = name unless name.equal?(UNSET)
      call("user.update", args)
    end

    # Deletes the user's record and every session of theirs. Admin group.
    def delete_user(sub, issuer: nil) = call("user.delete", compact("sub" => sub, "issuer" => issuer))

    # Signs a user in with Sign in with Apple: verifies the token, optionally exchanges the code,
    # creates or updates the user and creates a session.
    def apple_sign_in(identity_token, authorization_code: nil, client_id: nil, nonce: nil, user: nil, session: nil)
      call("apple.sign_in", compact("identity_token" => identity_token, "authorization_code" => authorization_code,
                                    "client_id" => client_id, "nonce" => nonce, "user" => user, "session" => session))
    end

    # Applies a server-to-server notification from Apple (+payload+: the JWT Apple posted).
    def apple_notification(payload) = call("apple.notification", { "payload" => payload })

    # Checks the user's stored refresh token at Apple now. Admin group.
    def apple_refresh_check(sub) = call("apple.refresh_check", { "sub" => sub })

    # The transfer identifier of a user moving to another team. Admin group.
    def apple_transfer_export(sub, target_team_id:, client_id: nil)
      call("apple.transfer.export", compact("sub" => sub, "target_team_id" => target_team_id, "client_id" => client_id))
    end

    # Moves a transferred user to their new sub. Admin group.
    def apple_transfer_import(transfer_sub, client_id: nil)
      call("apple.transfer.import", compact("transfer_sub" => transfer_sub, "client_id" => client_id))
    end

    # Revocations at Apple still owed for deleted users. Admin group.
    def apple_pending = call("apple.pending")

    # Starts Sign in with Apple on the web: {"url", "state", "expires_at", "cookie" => {"name", "value",
    # "max_age", "set_cookie"}}. Set the binding cookie as cookie["set_cookie"] says, then redirect
    # the browser to url.
    def apple_authorize(client_id: nil, redirect_uri: nil, scope: nil, return_to: nil)
      call("apple.authorize", compact("client_id" => client_id, "redirect_uri" => redirect_uri,
                                      "scope" => scope, "return_to" => return_to))
    end

    # Finishes Sign in with Apple on the web: +form+ is Apple's POST to the redirect URI (a Hash of
    # its fields, strings; nil sends an empty one), +cookie+ the binding cookie's value as the browser
    # sent it. Answers apple_sign_in's result and "return_to", where to send the browser. Not safe to
    # repeat: keyholed uses a state up on the callback that names it, whatever the outcome.
    def apple_callback(form, cookie:, session: nil)
      form = {} if form.nil?
      raise ArgumentError, "form must be a Hash" unless form.is_a?(Hash)

      call("apple.callback", compact("form" => form, "cookie" => cookie, "session" => session))
    end

    # Writes a snapshot of users and sessions. Admin group.
    def admin_snapshot = call("admin.snapshot")

    # Reads keyholed's configuration again. Admin group.
    def admin_reload = call("admin.reload")

    private

    def compact(args) = args.compact
  end
end
