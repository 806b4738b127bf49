# frozen_string_literal: true

$LOAD_PATH.unshift(File.expand_path("../lib", __dir__))
require "keyhole"
require "json"
require "minitest/autorun"
require "net/http"
require "tempfile"
require "tmpdir"

module KeyholeTest
  CLIENT_DIR = File.expand_path("..", __dir__)
  PROTOCOL_DIR = File.expand_path("../../..", __dir__)
  OPS_JSON = File.join(PROTOCOL_DIR, "ops.json")
  SCENARIOS_JSON = File.join(PROTOCOL_DIR, "vectors", "client_scenarios.json")
  SCENARIO_SERVER = File.join(PROTOCOL_DIR, "testing", "scenario_server.py")
  HARNESS = File.join(PROTOCOL_DIR, "testing", "keyholed_harness.py")
  EXIT_WAIT = 10

  # Waits for a child process to exit within +seconds+; its Process::Status, or nil (then it is killed).
  def self.wait_exit(pid, seconds = EXIT_WAIT)
    waiter = Process.detach(pid)
    return waiter.value if waiter.join(seconds)

    Process.kill("KILL", pid)
    waiter.join
    nil
  end

  # One request frame read from +io+ (a Hash), or nil at end of stream: for servers scripted in Ruby.
  def self.read_frame(io)
    header = io.read(4)
    return nil if header.nil? || header.bytesize < 4

    JSON.parse(io.read(header.unpack1("N")))
  end

  # Writes +object+ to +io+ as one frame.
  def self.write_frame(io, object)
    body = JSON.generate(object)
    io.write([body.bytesize].pack("N") + body)
  end

  # A fresh socket path (short: sun_path holds 107 bytes).
  def self.socket_path(tag)
    @sockets ||= 0
    @sockets += 1
    File.join(Dir.tmpdir, "khrb-#{Process.pid}-#{tag}-#{@sockets}.sock")
  end

  # A real keyholed under Protocol/testing/keyholed_harness.py ($KEYHOLED names the binary).
  class Harness
    attr_reader :info, :lines

    def initialize(config_extra: nil)
      cmd = ["python3", HARNESS]
      cmd += ["--config-extra", config_extra] if config_extra
      @stderr = Tempfile.create("khrb-harness")
      @io = IO.popen(cmd, "r+", err: @stderr.path)
      line = @io.gets
      raise "keyholed_harness did not start: #{File.read(@stderr.path)}" if line.nil?

      @info = JSON.parse(line)
      @lines = Queue.new
      @reader = Thread.new do
        while (l = @io.gets)
          @lines << JSON.parse(l)
        end
        @lines << nil
      end
    end

    def socket = @info["socket"]
    def token = @info["token"]
    def sub = @info["sub"]

    # Sends a command; answers the harness's next line.
    def command(line)
      @io.puts(line)
      @io.flush
      @lines.pop
    end

    # Stops keyholed; raises unless the harness exits 0 (every keyholed exited 0 after SIGTERM).
    def stop
      return if @stopped

      @stopped = true
      begin
        @io.puts("stop")
        @io.close_write
      rescue IOError, Errno::EPIPE
        nil
      end
      @reader.join(EXIT_WAIT)
      status = KeyholeTest.wait_exit(@io.pid)
      @io.close
      log = File.read(@stderr.path)
      File.unlink(@stderr.path)
      raise "keyholed_harness failed (#{status.inspect}): #{log}" unless status&.success?
    end

    @shared = nil
    class << self
      # One keyholed shared by the tests that do not restart it, stopped when the run ends.
      def shared
        @shared ||= begin
          harness = new
          Minitest.after_run { harness.stop }
          harness
        end
      end

      # A keyholed whose Apple audience (the shared harness's token's aud) is a web client returning
      # to `redirect_uri`, one per URI, stopped when the run ends.
      def apple_web(redirect_uri)
        (@apple_web ||= {})[redirect_uri] ||= begin
          audience = shared.info.fetch("audience")
          harness = new(config_extra: "[apple]\nredirect_uris = { #{JSON.generate(audience)} = #{JSON.generate(redirect_uri)} }\n")
          Minitest.after_run { harness.stop }
          harness
        end
      end
    end
  end
end
