# frozen_string_literal: true

module Keyhole
  # Rack middleware (Rails, Sinatra, any Rack app): finds the request's session token, asks keyholed
  # for its session, and hands the session and its user to the app in the Rack env:
  #
  #   env["keyhole.session"]  the whole session.get result (a Hash), or nil when anonymous
  #   env["keyhole.user"]     its "user" (a Hash, or nil: no record, or anonymous)
  #
  # The token comes from "Authorization: Bearer kh_..." when the request has one, else from the
  # cookie (default name kh_session); never from the query string. No token, or session_not_found:
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
    MAX_TOKEN_BYTES = 4096
    BEARER = /\ABearer[ \t]+(kh_[^ \t]*)[ \t]*\z/i.freeze

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

    # The session token of a Rack request: the Bearer credential starting with kh_, else the
    # cookie's value; nil when neither is there (or it cannot be a token: not UTF-8, too long).
    def self.token(env, cookie: DEFAULT_COOKIE)
      auth = env["HTTP_AUTHORIZATION"]
      bearer = BEARER.match(auth.b) if auth.is_a?(String)
      token = bearer && bearer[1]
      token ||= cookie_value(env["HTTP_COOKIE"], cookie)
      return nil if token.nil? || token.empty? || token.bytesize > MAX_TOKEN_BYTES

      token = token.dup.force_encoding(Encoding::UTF_8)
      token.valid_encoding? ? token : nil
    end

    # The first cookie of that name in a Cookie header (RFC 6265 section 5.4), or nil.
    def self.cookie_value(header, name)
      return nil unless header.is_a?(String)

      header.split(";").each do |pair|
        key, value = pair.split("=", 2)
        next if value.nil? || key.strip != name

        value = value.strip
        value = value[1..-2] if value.length >= 2 && value.start_with?('"') && value.end_with?('"')
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
