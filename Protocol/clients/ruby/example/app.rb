# frozen_string_literal: true

# An example Rack app on Keyhole: sign in from an identity token, a page for signed-in users only,
# sign out. Rack and WEBrick from Debian (ruby-rack, ruby-webrick).
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

  # The whole app.
  def self.app(client)
    Routes.new(client)
  end

  # The routes. GET / is behind Keyhole::Middleware, which requires a session; sign-in and
  # sign-out look up no session, so that a cookie keyholed cannot answer for never keeps a browser
  # from signing in or out.
  class Routes
    def initialize(client)
      @client = client
      @home = Keyhole::Middleware.new(method(:home), client: client, cookie: COOKIE, required: true)
    end

    def call(env)
      request = Rack::Request.new(env)
      case [request.request_method, request.path_info]
      when ["GET", "/"] then @home.call(env)
      when ["POST", "/signin"] then sign_in(request)
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
    server = WEBrick::HTTPServer.new(BindAddress: "127.0.0.1", Port: port, AccessLog: [],
                                     Logger: WEBrick::Log.new($stderr, WEBrick::Log::WARN))
    server.mount("/", Rack::Handler::WEBrick, app(client))
    %w[INT TERM].each { |signal| trap(signal) { server.shutdown } }
    $stdout.puts "listening #{server.listeners.first.addr[1]}"
    $stdout.flush
    server.start
    client.close
  end
end

KeyholeExample.serve(Integer(ENV.fetch("PORT", "8080"))) if $PROGRAM_NAME == __FILE__
