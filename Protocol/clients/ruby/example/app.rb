# frozen_string_literal: true

# An example Rack app on Keyhole: sign in from an identity token or with Sign in with Apple on the
# web, a page for signed-in users only, sign out. Rack and WEBrick from Debian (ruby-rack, ruby-webrick).
#
#   KEYHOLE_SOCKET=/run/keyhole/keyhole.sock PORT=8080 ruby example/app.rb
#   (or: rackup example/config.ru)
#
# $KEYHOLE_TIMEOUT: each call's deadline in seconds (default 5).
# Listens on 127.0.0.1:$PORT (0: any free port) and prints "listening <port>" once it does.

$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "keyhole"
require "rack"

module KeyholeExample
  COOKIE = "kh_session"
  # keyholed refuses longer identity tokens (token_malformed); they are not sent to it at all.
  MAX_ID_TOKEN_BYTES = 16_384
  # keyholed's default name for Sign in with Apple's binding cookie ([apple] web_cookie); the name
  # each apple.authorize answers replaces it.
  APPLE_COOKIE = "__Host-kh_apple"
  # Failures that are keyholed's (unreachable, overloaded, failing), not the sign-in's: 503, as the
  # middleware answers. Any other refusal of a callback goes back to the sign-in page with its code.
  OUTAGE_CODES = (Keyhole::Error::CLIENT_CODES +
                  %w[overloaded shutting_down storage_unavailable internal permission_denied]).freeze

  # The whole app.
  def self.app(client)
    Routes.new(client)
  end

  # The routes. GET / is behind Keyhole::Middleware, which requires a session; sign-in (both kinds)
  # and sign-out look up no session, so that a cookie keyholed cannot answer for never keeps a
  # browser from signing in or out.
  class Routes
    def initialize(client)
      @client = client
      @home = Keyhole::Middleware.new(method(:home), client: client, cookie: COOKIE, required: true)
      @apple_cookie = APPLE_COOKIE
    end

    def call(env)
      request = Rack::Request.new(env)
      case [request.request_method, request.path_info]
      when ["GET", "/"] then @home.call(env)
      when ["GET", "/signin"] then sign_in_page(request)
      when ["POST", "/signin"] then sign_in(request)
      when ["GET", "/auth/apple"] then apple_start(request)
      when ["POST", "/auth/apple/callback"] then apple_callback(request)
      when ["POST", "/signout"] then sign_out(request)
      else [404, { "content-type" => "text/plain" }, ["not found\n"]]
      end
    end

    private

    # Only reached with a session (the middleware answers 401 otherwise).
    def home(env)
      sub = Rack::Utils.escape_html(env["keyhole.session"]["sub"])
      html = <<~HTML
        <!doctype html>
        <title>Keyhole example</title>
        <p>Signed in as <b>#{sub}</b>.</p>
        <form method="post" action="/signout"><button>Sign out</button></form>
      HTML
      [200, { "content-type" => "text/html; charset=utf-8", "cache-control" => "no-store" }, [html]]
    end

    # The sign-in page: the Sign in with Apple button, and the code of a sign-in that failed
    # (?error=, escaped: anyone can write that link).
    def sign_in_page(request)
      error = query(request, "error")
      failed = if error.is_a?(String) && !error.empty? && error.valid_encoding?
                 "<p>Sign-in failed: <code>#{Rack::Utils.escape_html(error)}</code></p>\n"
               else
                 ""
               end
      html = <<~HTML
        <!doctype html>
        <title>Sign in - Keyhole example</title>
        #{failed}<p><a href="/auth/apple">Sign in with Apple</a></p>
      HTML
      [200, { "content-type" => "text/html; charset=utf-8", "cache-control" => "no-store" }, [html]]
    end

    # apple.authorize, then its binding cookie set as given and the browser sent to Apple. ?return_to=
    # is passed as it is: keyholed refuses anything off-site (bad_request), and that is a 400.
    def apple_start(request)
      return_to = query(request, "return_to", "/")
      return text(400, "bad return_to\n") unless return_to.is_a?(String) && return_to.valid_encoding?

      begin
        started = @client.apple_authorize(return_to: return_to)
      rescue Keyhole::Error => e
        return text(400, "bad return_to\n") if e.code == "bad_request"

        # The code only: no message, which could quote what the browser sent.
        request.env["rack.errors"].write("example: apple.authorize failed (#{e.code})\n")
        return text(503, "sign-in unavailable, try again\n")
      end
      @apple_cookie = started["cookie"]["name"]
      [302, { "location" => started["url"], "set-cookie" => started["cookie"]["set_cookie"],
              "cache-control" => "no-store" }, []]
    end

    # Apple's form POST: apple.callback with its fields and the binding cookie's value ("" when the
    # browser sent none), then the session cookie and the browser sent to the callback's return_to.
    # A refusal (state_invalid, apple_authorization_refused, token_*, ...) goes back to the sign-in
    # page with its code; nothing of the form or the cookie is ever logged or shown.
    def apple_callback(request)
      form = apple_form(request)
      cookie = request.cookies[@apple_cookie] || ""
      return text(400, "bad form\n") if form.nil? || !utf8?(cookie)

      begin
        signed_in = @client.apple_callback(form, cookie: cookie)
      rescue Keyhole::Error => e
        if OUTAGE_CODES.include?(e.code)
          request.env["rack.errors"].write("example: apple.callback failed (#{e.code})\n")
          return text(503, "sign-in unavailable, try again\n")
        end
        location = "/signin?error=#{Rack::Utils.escape(e.code)}"
        return [303, { "location" => location, "cache-control" => "no-store" }, []]
      end
      cookie = "#{COOKIE}=#{signed_in['session']['session']}; HttpOnly; Secure; SameSite=Lax; Path=/"
      [303, { "location" => signed_in["return_to"], "set-cookie" => cookie, "cache-control" => "no-store" }, []]
    end

    # The POSTed fields that are strings (Rack makes a[b]=... a Hash and a bare name nil; those are
    # left out), or nil when the body does not parse or a field is not UTF-8 (it could not be sent as
    # JSON).
    def apple_form(request)
      fields = request.POST.filter_map do |name, value|
        [utf8(name), utf8(value)] if value.is_a?(String)
      end
      fields.all? { |name, value| name.valid_encoding? && value.valid_encoding? } ? fields.to_h : nil
    rescue Rack::Utils::ParameterTypeError, Rack::Utils::InvalidParameterError
      nil
    end

    # A query parameter as Rack parses it (a String; an Array or Hash for a[]= and a[b]=), +default+
    # when absent, nil when the query does not parse.
    def query(request, name, default = nil)
      value = request.GET.fetch(name, default)
      value.is_a?(String) ? utf8(value) : value
    rescue Rack::Utils::ParameterTypeError, Rack::Utils::InvalidParameterError
      nil
    end

    def utf8(string) = string.dup.force_encoding(Encoding::UTF_8)
    def utf8?(string) = utf8(string).valid_encoding?

    # token.verify, then session.create for its issuer and sub, then the cookie.
    def sign_in(request)
      id_token = request.POST["id_token"]
      return text(401, "no identity token\n") unless id_token.is_a?(String) && !id_token.empty?
      # Not asked about: longer than keyholed takes, or not UTF-8 (it could not be sent as JSON).
      id_token = id_token.dup.force_encoding(Encoding::UTF_8)
      if id_token.bytesize > MAX_ID_TOKEN_BYTES || !id_token.valid_encoding?
        return text(401, "the identity token does not verify\n")
      end

      begin
        claims = @client.verify_token(id_token)
        session = @client.create_session(claims["sub"], issuer: claims["issuer"])
      rescue Keyhole::Error => e
        # bad_request: keyholed refused the token as an argument; it is the token's fault, not an outage.
        return text(401, "the identity token does not verify\n") if e.code.start_with?("token_") || e.code == "bad_request"

        request.env["rack.errors"].write("example: sign-in failed (#{e.code}): #{e.message}\n")
        return text(503, "sign-in unavailable, try again\n")
      end
      cookie = "#{COOKIE}=#{session['session']}; HttpOnly; Secure; SameSite=Lax; Path=/"
      [303, { "location" => "/", "set-cookie" => cookie, "cache-control" => "no-store" }, []]
    end

    # session.revoke of the cookie's session (only a value of a token's shape is sent), the cookie
    # cleared.
    def sign_out(request)
      token = Keyhole::Middleware.cookie_token(request.env["HTTP_COOKIE"], COOKIE)
      if token
        begin
          @client.revoke_session(session: token)
        rescue Keyhole::Error => e
          request.env["rack.errors"].write("example: sign-out failed (#{e.code}): #{e.message}\n")
          return text(503, "sign-out unavailable, try again\n")
        end
      end
      cookie = "#{COOKIE}=; Max-Age=0; HttpOnly; Secure; SameSite=Lax; Path=/"
      [303, { "location" => "/", "set-cookie" => cookie, "cache-control" => "no-store" }, []]
    end

    def text(status, body) = [status, { "content-type" => "text/plain; charset=utf-8" }, [body]]
  end

  # Serves the app with WEBrick on 127.0.0.1:port until SIGINT or SIGTERM.
  def self.serve(port)
    require "webrick"
    require "rack/handler/webrick"
    # $KEYHOLE_SOCKET, else /run/keyhole/keyhole.sock; $KEYHOLE_TIMEOUT seconds per call (default 5).
    client = Keyhole::Client.new(timeout: Float(ENV.fetch("KEYHOLE_TIMEOUT", "5")))
    # "listening" is printed once the server runs: a signal before that would stop a server not yet
    # started, and start would then serve on and never stop.
    server = nil
    started = lambda do
      $stdout.puts "listening #{server.listeners.first.addr[1]}"
      $stdout.flush
    end
    server = WEBrick::HTTPServer.new(BindAddress: "127.0.0.1", Port: port, AccessLog: [], StartCallback: started,
                                     Logger: WEBrick::Log.new($stderr, WEBrick::Log::WARN))
    server.mount("/", Rack::Handler::WEBrick, app(client))
    %w[INT TERM].each { |signal| trap(signal) { server.shutdown } }
    server.start
    client.close
  end
end

KeyholeExample.serve(Integer(ENV.fetch("PORT", "8080"))) if $PROGRAM_NAME == __FILE__
