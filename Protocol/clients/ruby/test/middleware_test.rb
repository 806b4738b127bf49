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

  def test_token_extraction
    token = "kh_#{'C' * 43}"
    assert_equal token, Keyhole::Middleware.token({ "HTTP_AUTHORIZATION" => "bearer #{token}" })
    assert_equal token, Keyhole::Middleware.token({ "HTTP_COOKIE" => "a=1; kh_session=\"#{token}\"; kh_session=other" })
    assert_nil Keyhole::Middleware.token({ "HTTP_COOKIE" => "xkh_session=#{token}" })
    assert_nil Keyhole::Middleware.token({ "QUERY_STRING" => "kh_session=#{token}" })
    assert_nil Keyhole::Middleware.token({ "HTTP_COOKIE" => "kh_session=\xff\xfe".b })
  end

  private

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
