# frozen_string_literal: true

require_relative "test_helper"

# example/app.rb as a child process (ruby, Rack, WEBrick) against a real keyholed, over real HTTP.
class ExampleTest < Minitest::Test
  APP = File.join(KeyholeTest::CLIENT_DIR, "example", "app.rb")
  APPLE_REDIRECT_URI = "https://example.com/auth/apple/callback"

  def harness = KeyholeTest::Harness.shared
  def apple_harness = KeyholeTest::Harness.apple_web(APPLE_REDIRECT_URI)

  def teardown
    stop_app
  end

  def test_sign_in_page_sign_out
    port = start_app(harness.socket)
    response = post(port, "/signin", "id_token" => harness.token)
    assert_equal "303", response.code
    assert_equal "/", URI(response["location"]).path
    cookie = response["set-cookie"]
    assert_match(/\Akh_session=kh_[A-Za-z0-9_-]{43}; /, cookie)
    %w[HttpOnly Secure SameSite=Lax Path=/].each { |attribute| assert_includes cookie.split("; "), attribute }
    session = cookie[/\Akh_session=([^;]+)/, 1]

    page = get(port, "/", session)
    assert_equal "200", page.code
    assert_includes page.body, harness.sub

    signed_out = post(port, "/signout", {}, session)
    assert_equal "303", signed_out.code
    assert_match(/\Akh_session=; Max-Age=0; /, signed_out["set-cookie"])
    assert_equal "401", get(port, "/", session).code, "the old cookie no longer signs in"
    error = assert_raises(Keyhole::Error) { Keyhole::Client.new(socket: harness.socket).get_session(session) }
    assert_equal "session_not_found", error.code
  end

  def test_not_signed_in_is_401
    port = start_app(harness.socket)
    response = get(port, "/")
    assert_equal "401", response.code
    assert_equal 'Bearer realm="keyhole"', response["www-authenticate"]
  end

  def test_forged_token_is_401_without_a_session
    port = start_app(harness.socket)
    header, payload, signature = harness.token.split(".")
    response = post(port, "/signin", "id_token" => [header, payload, "A#{signature[1..]}"].join("."))
    assert_equal "401", response.code
    assert_nil response["set-cookie"]
  end

  def test_unreachable_keyholed_is_503
    token = Keyhole::Client.new(socket: harness.socket).create_session("rb-example-503")["session"]
    port = start_app(KeyholeTest.socket_path("nobody"))
    response = get(port, "/", token)
    assert_equal "503", response.code
    refute_includes response.body, "rb-example-503"
  end

  # An id_token longer than keyholed takes is 401 without asking it (its stats count no
  # token.verify); one of exactly 16 384 bytes is asked (and refused: 401). Bytes that are not UTF-8
  # are 401 too, never a 500.
  def test_overlong_id_token_is_401_without_asking_keyholed
    port = start_app(harness.socket)
    stats = Keyhole::Client.new(socket: harness.socket)
    before = verifies(stats)
    ["a" * 16_385, "a" * 70_000, "\xff\xfe.a.b".b].each do |id_token|
      response = post(port, "/signin", "id_token" => id_token)
      assert_equal "401", response.code
      assert_nil response["set-cookie"]
    end
    assert_equal before, verifies(stats), "keyholed was not asked"
    assert_equal "401", post(port, "/signin", "id_token" => "a" * 16_384).code
    assert_equal before + 1, verifies(stats)
  ensure
    stats&.close
  end

  # A cookie that is not a token's shape (1 025 bytes, which keyholed would refuse as bad_request)
  # neither blocks signing in nor out: keyholed is not asked about it.
  def test_junk_cookie_does_not_block_sign_in_or_sign_out
    port = start_app(harness.socket)
    stats = Keyhole::Client.new(socket: harness.socket)
    junk = "kh_#{'A' * 1022}"
    gets_before = stats.stats["requests"]["session.get"]
    revokes_before = stats.stats["requests"]["session.revoke"]
    signed_in = post(port, "/signin", { "id_token" => harness.token }, junk)
    assert_equal "303", signed_in.code
    assert_match(/\Akh_session=kh_[A-Za-z0-9_-]{43}; /, signed_in["set-cookie"])
    assert_equal "401", get(port, "/", junk).code
    signed_out = post(port, "/signout", {}, junk)
    assert_equal "303", signed_out.code
    assert_match(/\Akh_session=; Max-Age=0; /, signed_out["set-cookie"])
    requests = stats.stats["requests"]
    assert_equal gets_before, requests["session.get"], "no session.get for the junk cookie"
    assert_equal revokes_before, requests["session.revoke"], "no session.revoke for the junk cookie"
  ensure
    stats&.close
  end

  # token.verify answered bad_request (by a Ruby UNIXServer playing keyholed): 401, never 503, and
  # no session is created.
  def test_bad_request_from_token_verify_is_401
    path = KeyholeTest.socket_path("badreq")
    server = UNIXServer.new(path)
    ops = Queue.new
    thread = Thread.new do
      conn = server.accept
      while (request = KeyholeTest.read_frame(conn))
        ops << request["op"]
        KeyholeTest.write_frame(conn, { "id" => request["id"], "ok" => false,
                                        "error" => { "code" => "bad_request", "message" => "'token' is required" } })
      end
      conn.close
    end
    port = start_app(path)
    response = post(port, "/signin", "id_token" => "a.b.c")
    assert_equal "401", response.code
    assert_nil response["set-cookie"]
    stop_app
    thread.join(5)
    assert_equal ["token.verify"], Array.new(ops.size) { ops.pop }
  ensure
    server&.close
    File.unlink(path) if path && File.exist?(path)
  end

  # SIGTERM as soon as the example says it listens stops it (a signal before its server ran used to
  # leave it serving on).
  def test_exits_on_sigterm_right_after_listening
    5.times do
      start_app(KeyholeTest.socket_path("nobody"))
      stop_app
    end
  end

  def test_sign_in_page_has_the_apple_button
    port = start_app(apple_harness.socket)
    page = get(port, "/signin")
    assert_equal "200", page.code
    assert_match(%r{<a href="/auth/apple">Sign in with Apple</a>}, page.body)
    refute_includes page.body, "Sign-in failed"
  end

  # GET /auth/apple: 302 to Apple with the binding cookie set as keyholed wrote it; an off-site
  # return_to (refused by keyholed) is 400 with no cookie.
  def test_apple_start_redirects_to_apple_with_the_binding_cookie
    port = start_app(apple_harness.socket)
    response = get(port, "/auth/apple")
    assert_equal "302", response.code
    location = response["location"]
    assert location.start_with?("http://127.0.0.1:9/auth/authorize?"), location
    assert_includes location, "redirect_uri=https%3A%2F%2Fexample.com%2Fauth%2Fapple%2Fcallback"
    set_cookie = response["set-cookie"]
    assert set_cookie.start_with?("__Host-kh_apple="), set_cookie
    attributes = set_cookie.split(";").map(&:strip)
    %w[Secure HttpOnly SameSite=None Path=/ Max-Age=600].each { |a| assert_includes attributes, a, set_cookie }
    assert_match(/\A__Host-kh_apple=[A-Za-z0-9_-]{43};/, set_cookie)

    assert_equal "302", get(port, "/auth/apple?return_to=%2Faccount").code
    ["//evil.example", "https://evil.example/", "%2F%2Fevil.example"].each do |return_to|
      refused = get(port, "/auth/apple?return_to=#{return_to}")
      assert_equal "400", refused.code, return_to
      assert_nil refused["set-cookie"], return_to
    end
    assert_equal "400", get(port, "/auth/apple?return_to[]=/account").code
    assert_equal "400", get(port, "/auth/apple?return_to=%2F%FF").code
  end

  # Apple's error (the user cancelled) with this browser's cookie: back to the sign-in page with
  # apple_authorization_refused, shown there; no session cookie; nothing secret in the app's log.
  def test_apple_callback_cancelled_goes_back_to_sign_in
    log = Tempfile.create("khrb-example-log")
    port = start_app(apple_harness.socket, err: log.path)
    state, cookie = apple_start(port)
    response = post_cookie(port, "/auth/apple/callback", { "state" => state, "error" => "user_cancelled_authorize" },
                         "__Host-kh_apple=#{cookie}")
    assert_refused_to_sign_in response, "apple_authorization_refused", port
    stop_app
    logged = File.read(log.path)
    refute_includes logged, state
    refute_includes logged, cookie
  ensure
    File.unlink(log.path) if log
  end

  # Another browser's cookie, or none: state_invalid, shown on the sign-in page; no session cookie.
  def test_apple_callback_with_a_wrong_or_no_cookie_is_state_invalid
    port = start_app(apple_harness.socket)
    state, cookie = apple_start(port)
    form = { "state" => state, "code" => "c", "id_token" => "x" }
    response = post_cookie(port, "/auth/apple/callback", form, "__Host-kh_apple=#{cookie.reverse}")
    assert_refused_to_sign_in response, "state_invalid", port

    state, = apple_start(port)
    response = post_cookie(port, "/auth/apple/callback", form.merge("state" => state), nil)
    assert_refused_to_sign_in response, "state_invalid", port
  end

  # The error shown on the sign-in page is escaped: anyone can write a link to it.
  def test_sign_in_page_escapes_the_error
    port = start_app(apple_harness.socket)
    page = get(port, "/signin?error=#{URI.encode_www_form_component('<script>x</script>')}")
    assert_equal "200", page.code
    assert_includes page.body, "&lt;script&gt;x&lt;&#x2F;script&gt;"
    refute_includes page.body, "<script>"
  end

  # A form keyholed could not be sent (a field that is not UTF-8) is 400, never a 500, and no session.
  def test_apple_callback_form_not_utf8_is_400
    port = start_app(apple_harness.socket)
    state, cookie = apple_start(port)
    response = post_cookie(port, "/auth/apple/callback", { "state" => state, "error" => "\xff".b },
                         "__Host-kh_apple=#{cookie}")
    assert_equal "400", response.code
    assert_nil response["set-cookie"]
  end

  def test_apple_with_keyholed_unreachable_is_503
    port = start_app(KeyholeTest.socket_path("nobody"))
    assert_equal "503", get(port, "/auth/apple").code
    response = post_cookie(port, "/auth/apple/callback", { "state" => "s", "error" => "user_cancelled_authorize" },
                         "__Host-kh_apple=v")
    assert_equal "503", response.code
    assert_nil response["set-cookie"]
  end

  private

  # GET /auth/apple; answers the state Apple is sent and the binding cookie's value.
  def apple_start(port)
    response = get(port, "/auth/apple")
    assert_equal "302", response.code
    state = URI.decode_www_form(URI(response["location"]).query).to_h.fetch("state")
    cookie = response["set-cookie"][/\A__Host-kh_apple=([^;]+);/, 1]
    refute_nil cookie
    [state, cookie]
  end

  # A 303 to the sign-in page with ?error=+code+, no cookie set, and the page showing the code.
  def assert_refused_to_sign_in(response, code, port)
    assert_equal "303", response.code
    assert_nil response["set-cookie"], "no session cookie"
    location = URI(response["location"])
    assert_equal "/signin", location.path
    assert_equal({ "error" => code }, URI.decode_www_form(location.query).to_h)
    page = get(port, location.request_uri)
    assert_equal "200", page.code
    assert_includes page.body, "Sign-in failed: <code>#{code}</code>"
  end

  def verifies(client) = client.stats["requests"]["token.verify"]

  def start_app(socket, err: File::NULL)
    @out_r, out_w = IO.pipe
    env = { "PORT" => "0", "KEYHOLE_SOCKET" => socket, "KEYHOLE_TIMEOUT" => "0.5" }
    @pid = Process.spawn(env, RbConfig.ruby, APP, out: out_w, err: err)
    out_w.close
    line = @out_r.gets
    assert_match(/\Alistening \d+\n\z/, line.to_s, "the example did not start")
    Integer(line.split[1])
  end

  def stop_app
    return unless @pid

    Process.kill("TERM", @pid)
    status = KeyholeTest.wait_exit(@pid)
    @out_r.close
    @pid = nil
    assert status, "the example exits on SIGTERM"
  end

  def get(port, path, session = nil)
    Net::HTTP.start("127.0.0.1", port) do |http|
      request = Net::HTTP::Get.new(path)
      request["Cookie"] = "kh_session=#{session}" if session
      http.request(request)
    end
  end

  def post(port, path, form, session = nil)
    post_cookie(port, path, form, session && "kh_session=#{session}")
  end

  # +cookie+: the whole Cookie header, or nil for none.
  def post_cookie(port, path, form, cookie)
    Net::HTTP.start("127.0.0.1", port) do |http|
      request = Net::HTTP::Post.new(path)
      request.set_form_data(form)
      request["Cookie"] = cookie if cookie
      http.request(request)
    end
  end
end
