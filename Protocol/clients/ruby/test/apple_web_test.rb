# frozen_string_literal: true

require_relative "test_helper"

# Sign in with Apple on the web (apple.authorize, apple.callback) against a real keyholed whose Apple
# audience is a web client with a redirect URI. No test reaches Apple: each callback is refused
# before the code exchange, at the step it is about.
class AppleWebTest < Minitest::Test
  REDIRECT_URI = "https://example.com/apple/callback"

  def self.harness = KeyholeTest::Harness.apple_web(REDIRECT_URI)

  def setup
    @client = Keyhole::Client.new(socket: self.class.harness.socket)
  end

  def teardown
    @client.close
  end

  def test_authorize_with_defaults
    result = @client.apple_authorize
    state = result["state"]
    cookie = result["cookie"]
    assert_match(/\A[A-Za-z0-9_-]{43}\z/, state)
    assert result["url"].start_with?("http://127.0.0.1:9/auth/authorize?"), result["url"]
    params = URI.decode_www_form(URI(result["url"]).query).to_h
    assert_equal state, params["state"]
    assert_includes result["url"], "state=#{state}"
    assert_includes result["url"], "response_mode=form_post"
    assert_equal self.class.harness.info["audience"], params["client_id"]
    assert_equal REDIRECT_URI, params["redirect_uri"]
    assert_equal "__Host-kh_apple", cookie["name"]
    assert_match(/\A[A-Za-z0-9_-]{43}\z/, cookie["value"])
    refute_equal state, cookie["value"]
    assert cookie["set_cookie"].start_with?("__Host-kh_apple=#{cookie['value']};"), cookie["set_cookie"]
    attributes = cookie["set_cookie"].split(";").map(&:strip)
    %w[Secure HttpOnly SameSite=None].each { |a| assert_includes attributes, a, cookie["set_cookie"] }
    assert_equal 600, cookie["max_age"]
    assert_kind_of Integer, result["expires_at"]
    refute_equal state, @client.apple_authorize["state"], "each authorization draws its own state"
  end

  def test_authorize_sends_its_arguments
    audience = self.class.harness.info["audience"]
    result = @client.apple_authorize(client_id: audience, redirect_uri: REDIRECT_URI, scope: "email", return_to: "/account")
    params = URI.decode_www_form(URI(result["url"]).query).to_h
    assert_equal "email", params["scope"]
    assert_equal audience, params["client_id"]
    assert_equal "name email", URI.decode_www_form(URI(@client.apple_authorize["url"]).query).to_h["scope"]
    error = assert_raises(Keyhole::Error) { @client.apple_authorize(redirect_uri: "https://example.com/other") }
    assert_equal "bad_request", error.code
  end

  def test_authorize_refuses_an_off_site_return_to
    error = assert_raises(Keyhole::Error) { @client.apple_authorize(return_to: "//evil.example") }
    assert_instance_of Keyhole::Error, error
    assert_equal "bad_request", error.code
  end

  # A callback with another browser's cookie is refused, and uses the state up: the right cookie
  # then finds nothing either.
  def test_callback_with_another_cookie_uses_up_the_state
    started = @client.apple_authorize
    state = started["state"]
    form = { "state" => state, "code" => "c", "id_token" => "x" }
    error = assert_raises(Keyhole::Error) { @client.apple_callback(form, cookie: "#{started['cookie']['value']}x") }
    assert_equal "state_invalid", error.code
    error = assert_raises(Keyhole::Error) { @client.apple_callback(form, cookie: started["cookie"]["value"]) }
    assert_equal "state_invalid", error.code
  end

  def test_callback_with_apples_error_is_refused
    started = @client.apple_authorize
    form = { "state" => started["state"], "error" => "user_cancelled_authorize" }
    error = assert_raises(Keyhole::Error) { @client.apple_callback(form, cookie: started["cookie"]["value"]) }
    assert_equal "apple_authorization_refused", error.code
    assert_equal "apple_authorization_refused", error.received_code
  end

  # The state and cookie pass: the refusal is the token's.
  def test_callback_with_the_right_state_and_cookie_reaches_the_token
    started = @client.apple_authorize
    form = { "state" => started["state"], "code" => "c", "id_token" => "not-a-token" }
    error = assert_raises(Keyhole::Error) do
      @client.apple_callback(form, cookie: started["cookie"]["value"], session: { ttl_s: 3600 })
    end
    assert_equal "token_malformed", error.code
  end

  # An empty form goes as an object, which keyholed reads and finds no id_token in (a form that is
  # not an object would be refused as such); a form that is not a Hash is refused before anything
  # is sent.
  def test_callback_without_a_state
    error = assert_raises(Keyhole::Error) { @client.apple_callback({}, cookie: "x") }
    assert_equal "bad_request", error.code
    assert_includes error.message, "id_token"
    error = assert_raises(Keyhole::Error) { @client.apple_callback(nil, cookie: "x") }
    assert_equal "bad_request", error.code
    assert_includes error.message, "id_token"
    assert_raises(ArgumentError) { @client.apple_callback("state=x", cookie: "x") }
  end
end

# The helpers' requests as keyholed reads them, through a server scripted in Ruby: optional
# arguments only when given, form always an object.
class AppleWebArgsTest < Minitest::Test
  def test_requests_carry_exactly_the_arguments_given
    path = KeyholeTest.socket_path("apple")
    server = UNIXServer.new(path)
    read = Queue.new
    thread = Thread.new do
      conn = server.accept
      while (request = KeyholeTest.read_frame(conn))
        read << [request["op"], request["args"]]
        KeyholeTest.write_frame(conn, { "id" => request["id"], "ok" => true, "result" => {} })
      end
      conn.close
    end
    client = Keyhole::Client.new(socket: path, timeout: 5)
    client.apple_authorize
    client.apple_authorize(scope: "", return_to: "/a")
    client.apple_authorize(client_id: "com.example.web", redirect_uri: "https://example.com/cb", scope: "name")
    client.apple_callback({}, cookie: "c")
    client.apple_callback(nil, cookie: "c")
    client.apple_callback({ "state" => "s", "code" => "k" }, cookie: "c", session: { "ttl_s" => 60, "data" => { "a" => 1 } })
    client.close
    thread.join(5)
    expected = [
      ["apple.authorize", {}],
      ["apple.authorize", { "scope" => "", "return_to" => "/a" }],
      ["apple.authorize", { "client_id" => "com.example.web", "redirect_uri" => "https://example.com/cb", "scope" => "name" }],
      ["apple.callback", { "form" => {}, "cookie" => "c" }],
      ["apple.callback", { "form" => {}, "cookie" => "c" }],
      ["apple.callback", { "form" => { "state" => "s", "code" => "k" }, "cookie" => "c",
                           "session" => { "ttl_s" => 60, "data" => { "a" => 1 } } }]
    ]
    assert_equal expected, Array.new(expected.size) { read.pop(true) }
    assert read.empty?
  ensure
    server&.close
    File.unlink(path) if path && File.exist?(path)
  end
end
