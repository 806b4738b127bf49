import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import NIOCore

/// A client of keyholed's that runs as another user (setpriv) and stays alive while the test goes on:
/// Python's socket module speaking the framing (4-byte big-endian length, then JSON), so that what it
/// sends is exactly what the test says, with the peer credentials of `uid`. Its modes (`script`):
///
/// - `hold N`: N connections, each answered one ping (printed); prints `held`, then keeps them open
///   until SIGTERM.
/// - `burst N`: one connection, N pings in one write; prints the answers by id.
/// - `unread N BYTES`: one connection, N debug.sleep requests each answered with BYTES bytes, none
///   read; prints `sent`, waits for SIGUSR1, then reads what it can until the end and prints how many
///   answers that was.
/// - `connects N`: N connections one after the other, each sending a ping and printing the first
///   answer it gets (an answer sent on connect, if keyholed refused it), then closed.
/// - `refused 1`: one connection; prints the first answer, then, once keyholed closed it, how long
///   (ms) the answer took to come, from just before the connect.
/// - `badframes N`: N connections one after the other, each sending a frame header of 4 GiB (a frame
///   error) and printing the answer, read until keyholed closes; then `connects 1`.
final class PeerProcess {
    static let script = #"""
        import json, signal, socket, struct, sys, time

        def frame(value):
            body = json.dumps(value).encode()
            return struct.pack(">I", len(body)) + body

        def read_exactly(sock, count):
            data = b""
            while len(data) < count:
                chunk = sock.recv(count - len(data))
                if not chunk:
                    return None
                data += chunk
            return data

        def read_frame(sock):
            head = read_exactly(sock, 4)
            if head is None:
                return None
            return json.loads(read_exactly(sock, struct.unpack(">I", head)[0]))

        def connect(path):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
            return sock

        def ping_once(path):
            sock = connect(path)
            try:
                sock.sendall(frame({"op": "ping", "id": 1}))
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused on connect: its answer is still there to read
            print(json.dumps(read_frame(sock)), flush=True)
            sock.close()

        # Signals are waited for with sigwait: blocked from the start, none can come too early.
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM, signal.SIGUSR1])
        mode, path, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
        if mode == "hold":
            held = []
            for number in range(count):
                sock = connect(path)
                sock.sendall(frame({"op": "ping", "id": number + 1}))
                print(json.dumps(read_frame(sock)), flush=True)
                held.append(sock)
            print("held", flush=True)
            signal.sigwait([signal.SIGTERM])
        elif mode == "burst":
            sock = connect(path)
            sock.sendall(b"".join(frame({"op": "ping", "id": number + 1}) for number in range(count)))
            answers = [read_frame(sock) for _ in range(count)]
            for answer in sorted(answers, key=lambda answer: answer["id"]):
                print(json.dumps(answer), flush=True)
        elif mode == "connects":
            for _ in range(count):
                ping_once(path)
        elif mode == "refused":
            connected = time.monotonic()
            sock = connect(path)
            print(json.dumps(read_frame(sock)), flush=True)
            answered = time.monotonic()
            while sock.recv(4096):
                pass
            print(json.dumps({"answered_after_ms": (answered - connected) * 1000}), flush=True)
        elif mode == "badframes":
            for _ in range(count):
                sock = connect(path)
                sock.sendall(b"\xff\xff\xff\xff")
                print(json.dumps(read_frame(sock)), flush=True)
                while sock.recv(4096):
                    pass
                sock.close()
            ping_once(path)
        elif mode == "unread":
            sock = connect(path)
            request = {"op": "debug.sleep", "args": {"ms": 20, "reply_bytes": int(sys.argv[4])}}
            sock.sendall(b"".join(frame(dict(request, id=number + 1)) for number in range(count)))
            print("sent", flush=True)
            signal.sigwait([signal.SIGUSR1])
            answers = 0
            try:
                while read_frame(sock) is not None:
                    answers += 1
            except ConnectionResetError:
                pass  # closed with bytes unread on keyholed's side: a close all the same
            print(json.dumps({"answers_read": answers}), flush=True)
        """#

    let pid: pid_t
    private let stdout: Int32
    private let stderr: Int32
    private var pending: [UInt8] = []
    private var finished: (status: Int32, stdout: String, stderr: String)?

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Starts the script as `uid` (its group the same, no supplementary groups) in `mode`.
    init(uid: Int, daemon: DaemonProcess, _ arguments: [String]) throws {
        let path = daemon.directory.appendingPathComponent("peer.py")
        if !FileManager.default.fileExists(atPath: path.path) {
            try Self.script.write(to: path, atomically: true, encoding: .utf8)
            chmod(path.path, 0o644)
        }
        let argv = ["/usr/bin/setpriv", "--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "/usr/bin/python3", path.path]
            + [arguments[0], daemon.socketPath] + arguments.dropFirst()
        let spawned = try ChildProcess.spawn(argv, captureStdout: true)
        (pid, stdout, stderr) = (spawned.pid, spawned.stdout!, spawned.stderr)
    }

    /// The next line it prints; nil once it ended without one. Blocks until then (the script prints
    /// each line as soon as it can, and ends soon after anything goes wrong).
    func line() -> String? {
        while true {
            if let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                defer { pending.removeSubrange(...newline) }
                return String(decoding: pending[..<newline], as: UTF8.self)
            }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let count = chunk.withUnsafeMutableBytes { read(stdout, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return nil }
            pending += chunk[..<count]
        }
    }

    /// The next line as a JSON value; throws with its error output when there is none.
    func answer() throws -> JSONValue {
        guard let text = line() else { throw Failure(description: "the peer ended: \(finish().stderr)") }
        return try JSONValue.parse(ByteBuffer(string: text))
    }

    func signal(_ signal: Int32) { kill(pid, signal) }

    /// Waits for it to exit; its exit status, the rest of its output and its error output.
    @discardableResult
    func finish() -> (status: Int32, stdout: String, stderr: String) {
        if let finished { return finished }
        var rest: [String] = []
        while let text = line() { rest.append(text) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(stderr, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += chunk[..<count]
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        close(stdout)
        close(stderr)
        let code = status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
        finished = (code, rest.joined(separator: "\n"), String(decoding: bytes, as: UTF8.self))
        return finished!
    }

    deinit {
        // A test that failed half-way: the peer does not outlive it.
        if finished == nil {
            kill(pid, SIGKILL)
            finish()
        }
    }
}
