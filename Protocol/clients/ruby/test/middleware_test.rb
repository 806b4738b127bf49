# frozen_string_literal: true

require_relative "test_helper"
require "rack"
require "webrick"
require "rack/handler/webrick"

# Keyhole::Middleware over real HTTP (WEBrick, in this process), against a real keyholed, the
# scripted server for keyholed's error codes, and a socket nobody listens on.
class MiddlewareTest < Minitest::Test
  # Shows what the middleware handed to the app.
  ECHO = lambda do |env|
    body = JSON.generate({ "session" => env["keyhole.session"], "user" => env["keyhole.user"],
                           "has_keys" => env.key?("keyhole.session") && env.key?("keyhole.user") })
    [200, { "content-type" => "application/json" }, [body]]
  end

  def harness = KeyholeTest::Harness.shared

  def setup
    @servers = []
    @client = Keyhole::Client.new(socket: harness.socket)
    @sub = "rb-mw-#{rand(1 << 40)}"
    @token = @client.create_session(@sub)["session"]
  end

  def teardown
    @servers.each { |server, thread| server.shutdown; thread.join(5) }
    @client.close
  end

  def test_no_credential_is_anonymous
    port = serve(client: @client)
    response = get(port)
    assert_equal "200", response.code
    assert_equal({ "session" => nil, "user" => nil, "has_keys" => true }, JSON.parse(response.body))
  end

  def test_cookie_signs_in
    port = serve(client: @client)
    body = JSON.parse(get(port, "Cookie" => "theme=dark; kh_session=#{@token}").body)
    assert_equal @sub, body["session"]["sub"]
    assert_equal @sub, body["user"]["sub"]
  end

  def test_cookie_name_option
    port = serve(client: @client, cookie: "auth")
    assert_nil JSON.parse(get(port, "Cookie" => "kh_session=#{@token}").body)["session"]
    assert_equal @sub, JSON.parse(get(port, "Cookie" => "auth=#{@token}").body)["session"]["sub"]
  end

  def test_bearer_signs_in_and_wins_over_the_cookie
    port = serve(client: @client)
    body = JSON.parse(get(port, "Authorization" => "Bearer #{@token}", "Cookie" => "kh_session=kh_#{'B' * 43}").body)
    assert_equal @sub, body["session"]["sub"]
  end

  def test_bearer_of_another_kind_falls_back_to_the_cookie
    port = serve(client: @client)
    body = JSON.parse(get(port, "Authorization" => "Bearer eyJhbGciOi.x.y", "Cookie" => "kh_session=#{@token}").body)
    assert_equal @sub, body["session"]["sub"]
  end

  def test_query_string_is_never_read
    port = serve(client: @client, required: true)
    response = get(port, {}, "/?kh_session=#{@token}&session=#{@token}")
    assert_equal "401", response.code
  end

  def test_unknown_session_is_anonymous_or_401_when_required
    port = serve(client: @client)
    assert_nil JSON.parse(get(port, "Cookie" => "kh_session=kh_#{'A' * 43}").body)["session"]
    required = serve(client: @client, required: true)
    response = get(required, "Cookie" => "kh_session=kh_#{'A' * 43}")
    assert_equal "401", response.code
    assert_equal 'Bearer realm="keyhole"', response["www-authenticate"]
    assert_equal "401", get(required).code
    assert_equal "200", get(required, "Cookie" => "kh_session=#{@token}").code
  end

  def test_required_predicate
    port = serve(client: @client, required: ->(env) { env["PATH_INFO"].start_with?("/private") })
    assert_equal "200", get(port, {}, "/public").code
    assert_equal "401", get(port, {}, "/private").code
  end

  def test_revoked_session_is_anonymous
    port = serve(client: @client)
    @client.revoke_session(session: @token)
    assert_nil JSON.parse(get(port, "Cookie" => "kh_session=#{@token}").body)["session"]
  end

  def test_unreachable_keyholed_is_503_never_signed_in
    port = serve(socket: KeyholeTest.socket_path("nobody"), timeout: 0.3)
    response = get(port, "Cookie" => "kh_session=#{@token}")
    assert_equal "503", response.code
    refute_includes response.body, @sub
  end

  # keyholed's own failures through the scripted server: storage_unavailable, and an unknown code
  # (internal): both 503.
  %w[known-error-code unknown-error-code].each do |name|
    define_method("test_#{name.tr('-', '_')}_from_keyholed_is_503") do
      path = KeyholeTest.socket_path("mw")
      out_r, out_w = IO.pipe
      pid = Process.spawn("python3", KeyholeTest::SCENARIO_SERVER, path, name, out: out_w, err: File::NULL)
      out_w.close
      assert_equal "ready", out_r.gets&.chomp
      client = Keyhole::Client.new(socket: path, timeout: 2)
      port = serve(client: client)
      response = get(port, "Cookie" => "kh_session=kh_#{'A' * 43}")
      assert_equal "503", response.code
      client.close
      assert KeyholeTest.wait_exit(pid)&.success?
    ensure
      out_r&.close
    end
  end

  # Credentials that are not a token's shape (kh_ and 43 base64url characters) are anonymous, and
  # keyholed is not asked: its stats count no session.get for them.
  def test_credentials_of_another_shape_are_anonymous_without_asking_keyholed
    open_port = serve(client: @client)
    required = serve(client: @client, required: true)
    credentials = [
      { "Cookie" => "kh_session=kh_#{'A' * 69_997}" },               # 70 000 bytes
      { "Cookie" => "kh_session=kh_#{'A' * 1022}" },                 # 1 025 bytes
      { "Cookie" => "kh_session=kh_#{'A' * 42}" },                   # one character short
      { "Cookie" => "kh_session=kh_#{'A' * 42}." },                  # not base64url
      { "Cookie" => "kh_session=#{'A' * 46}" },                      # no kh_
      { "Authorization" => "Bearer kh_#{'A' * 1022}" },
      { "Authorization" => "Bearer kh_#{'A' * 42}", "Cookie" => "kh_session=#{@token}" } # kh_ Bearer wins
    ]
    before = session_gets
    credentials.each do |headers|
      response = get(open_port, headers)
      assert_equal "200", response.code, headers.inspect[0, 80]
      assert_nil JSON.parse(response.body)["session"], headers.inspect[0, 80]
      response = get(required, headers)
      assert_equal "401", response.code, headers.inspect[0, 80]
      assert_equal 'Bearer realm="keyhole"', response["www-authenticate"]
    end
    assert_equal before, session_gets, "keyholed was not asked about any of them"
    assert_equal @sub, JSON.parse(get(open_port, "Cookie" => "kh_session=#{@token}").body)["session"]["sub"]
    assert_equal before + 1, session_gets
  end

  # The first cookie of the name wins; a malformed cookie beside it does not hide it.
  def test_malformed_neighbour_cookies_do_not_hide_the_session
    port = serve(client: @client)
    ["a=b c; kh_session=#{@token}", "a=\u00e9; kh_session=#{@token}", "a={\"j\":1}; kh_session=#{@token}",
     "novalue; kh_session=#{@token}", "a=\xff\xfe; kh_session=#{@token}".b, "kh_session=\"#{@token}\"",
     "kh_session=#{@token}; kh_session=kh_#{'B' * 43}", ";;=;kh_session =#{@token};"].each do |cookie|
      assert_equal @sub, JSON.parse(get(port, "Cookie" => cookie).body).dig("session", "sub"), cookie.inspect
    end
    assert_nil JSON.parse(get(port, "Cookie" => "kh_session=kh_#{'B' * 43}; kh_session=#{@token}").body)["session"],
               "the first cookie of the name wins"
  end

  def test_token_extraction
    token = "kh_#{'C' * 43}"
    assert_equal token, Keyhole::Middleware.token({ "HTTP_AUTHORIZATION" => "bearer #{token}" })
    assert_equal token, Keyhole::Middleware.token({ "HTTP_COOKIE" => "a=1; kh_session=\"#{token}\"; kh_session=other" })
    assert_nil Keyhole::Middleware.token({ "HTTP_COOKIE" => "xkh_session=#{token}" })
    assert_nil Keyhole::Middleware.token({ "QUERY_STRING" => "kh_session=#{token}" })
    assert_nil Keyhole::Middleware.token({ "HTTP_COOKIE" => "kh_session=\xff\xfe".b })
    assert_nil Keyhole::Middleware.token({ "HTTP_COOKIE" => "kh_session=#{token}\xff".b })
    assert_nil Keyhole::Middleware.token({ "HTTP_AUTHORIZATION" => "Bearer kh_short", "HTTP_COOKIE" => "kh_session=#{token}" })
    assert_equal token, Keyhole::Middleware.token({ "HTTP_AUTHORIZATION" => "Basic a2g6", "HTTP_COOKIE" => "kh_session=#{token}" })
  end

  private

  def session_gets = @client.stats["requests"]["session.get"]

  def serve(**options)
    app = Rack::Builder.new do
      use Keyhole::Middleware, **options
      run ECHO
    end.to_app
    server = WEBrick::HTTPServer.new(BindAddress: "127.0.0.1", Port: 0, AccessLog: [],
                                     Logger: WEBrick::Log.new(File::NULL))
    server.mount("/", Rack::Handler::WEBrick, app)
    thread = Thread.new { server.start }
    @servers << [server, thread]
    server.listeners.first.addr[1]
  end

  def get(port, headers = {}, path = "/")
    Net::HTTP.start("127.0.0.1", port) do |http|
      request = Net::HTTP::Get.new(path)
      headers.each { |k, v| request[k] = v }
      http.request(request)
    end
  end
end
