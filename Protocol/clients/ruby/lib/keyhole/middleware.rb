# frozen_string_literal: true

module Keyhole
  # Rack middleware (Rails, Sinatra, any Rack app): finds the request's session token, asks keyholed
  # for its session, and hands the session and its user to the app in the Rack env:
  #
  #   env["keyhole.session"]  the whole session.get result (a Hash), or nil when anonymous
  #   env["keyhole.user"]     its "user" (a Hash, or nil: no record, or anonymous)
  #
  # The token comes from "Authorization: Bearer kh_..." when the request has one, else from the
  # cookie (default name kh_session); never from the query string. A value that is not a token's
  # shape (kh_ and 43 base64url characters) is no token, and keyholed is not asked. No token, or
  # session_not_found:
  # anonymous (401 with WWW-Authenticate where a session is required). Any other failure
  # (keyholed unreachable, past the deadline, storage_unavailable, permission_denied, ...): 503,
  # and the app is not called: fail closed, never signed in.
  #
  #   use Keyhole::Middleware                                   # Rack / Sinatra
  #   config.middleware.use Keyhole::Middleware, required: true # Rails
  #
  # Options: +client+ (a Keyhole::Client to share), else +socket+ and +timeout+ for a client of its
  # own; +cookie+ (the cookie's name); +required+: true, false, or a callable taking the env and
  # answering whether this request needs a session.
  class Middleware
    SESSION = "keyhole.session"
    USER = "keyhole.user"
    DEFAULT_COOKIE = "kh_session"
    # A session token's shape (PROTOCOL.md section 5): anything else is not asked about.
    TOKEN = /\Akh_[A-Za-z0-9_-]{43}\z/.freeze
    TOKEN_BYTES = 46

    def initialize(app, client: nil, socket: nil, timeout: 5.0, cookie: DEFAULT_COOKIE, required: false)
      @app = app
      @client = client || Client.new(socket: socket, timeout: timeout)
      @cookie = cookie
      @required = required
    end

    def call(env)
      token = self.class.token(env, cookie: @cookie)
      session = nil
      if token
        begin
          session = @client.get_session(token)
        rescue Error => e
          return unavailable(env, e.code, e.message) unless e.code == "session_not_found"
        rescue StandardError => e
          return unavailable(env, e.class.name, e.message)
        end
      end
      env[SESSION] = session
      env[USER] = session && session["user"]
      return unauthorized if session.nil? && required?(env)

      @app.call(env)
    end

    # The session token of a Rack request: the Bearer credential when it starts with kh_, else the
    # cookie's value; nil when there is none, or when it is not a token's shape.
    def self.token(env, cookie: DEFAULT_COOKIE)
      bearer = bearer_value(env["HTTP_AUTHORIZATION"])
      return shaped(bearer) if bearer

      cookie_token(env["HTTP_COOKIE"], cookie)
    end

    # The session token in a Cookie header's first cookie of that name; nil when there is none, or
    # when it is not a token's shape.
    def self.cookie_token(header, name = DEFAULT_COOKIE)
      shaped(cookie_value(header, name))
    end

    # +value+ when it has a session token's shape (as a UTF-8 String), else nil.
    def self.shaped(value)
      return nil unless value.is_a?(String) && value.bytesize == TOKEN_BYTES

      value = value.b
      TOKEN.match?(value) ? value.force_encoding(Encoding::UTF_8) : nil
    end

    # The credential of "Authorization: Bearer <credential>" when it starts with kh_ (another kind
    # of Bearer credential leaves the cookie to be used), else nil.
    def self.bearer_value(header)
      return nil unless header.is_a?(String)

      header = header.b
      return nil unless header.bytesize > 7 && header.byteslice(0, 6).casecmp?("bearer") && " \t".include?(header.getbyte(6).chr)

      value = header.byteslice(7, header.bytesize - 7).strip
      value.start_with?("kh_") ? value : nil
    end

    # The value of the first cookie of that name in a Cookie header (RFC 6265 section 5.4, its
    # surrounding double quotes removed), or nil. One pass over the header: a malformed cookie
    # beside it (no "=", spaces, bytes that are not UTF-8) is skipped and does not hide it.
    def self.cookie_value(header, name)
      return nil unless header.is_a?(String)

      name = name.b
      header.b.split(";").each do |pair|
        equals = pair.index("=")
        next if equals.nil? || pair.byteslice(0, equals).strip != name

        value = pair.byteslice(equals + 1, pair.bytesize - equals - 1).strip
        value = value.byteslice(1, value.bytesize - 2) if value.bytesize >= 2 && value.start_with?('"') && value.end_with?('"')
        return value
      end
      nil
    end

    # The 401 answer for a request that needs a session and has none.
    def self.unauthorized_response
      [401, { "content-type" => "text/plain; charset=utf-8", "www-authenticate" => 'Bearer realm="keyhole"',
              "cache-control" => "no-store" }, ["sign in required\n"]]
    end

    private

    def required?(env)
      @required.respond_to?(:call) ? @required.call(env) : @required
    end

    def unauthorized = self.class.unauthorized_response

    def unavailable(env, code, message)
      # The reason goes to the server's log (never the token: no message of this client holds one).
      env["rack.errors"]&.write("keyhole: session.get failed (#{code}): #{message}; answering 503\n")
      [503, { "content-type" => "text/plain; charset=utf-8", "cache-control" => "no-store", "retry-after" => "1" },
       ["authentication unavailable\n"]]
    end
  end
end
