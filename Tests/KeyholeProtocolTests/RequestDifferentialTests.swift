import KeyholeProtocol
import KeyholeTestSupport
import NIOCore
import Testing

/// Request.parse checks `args` and unknown members without building them: random frames, valid and
/// mutated, against the general parser. Whenever the general parser refuses a frame (of at most 32
/// levels and 32 unknown members), Request.parse must refuse it with the same message; whenever it
/// accepts one, Request.parse must not refuse it as invalid JSON, and must read the same arguments.
@Suite("Request.parse against the general parser")
struct RequestDifferentialTests {
    static let names = ["a", "b", "\\u0061", "K", "\\u212A", "\u{212A}", "\u{E9}", "e\u{301}", "session", "s"]
    static let scalars = ["1", "-0", "1.5e3", "1e999", "01", "tru", "true", "null", "\"x\"", "\"\\q\"", "\"\\ud800\"", "\"a\\nb\"", "[]", "{}"]

    static func value(_ g: inout SeededGenerator, depth: Int) -> String {
        switch Int.random(in: 0..<(depth > 4 ? 1 : 3), using: &g) {
        case 1:
            let n = Int.random(in: 0..<4, using: &g)
            return "[" + (0..<n).map { _ in value(&g, depth: depth + 1) }.joined(separator: ",") + "]"
        case 2: return object(&g, depth: depth + 1)
        default: return scalars.randomElement(using: &g)!
        }
    }

    static func object(_ g: inout SeededGenerator, depth: Int) -> String {
        let n = Int.random(in: 0..<4, using: &g)
        return "{" + (0..<n).map { _ in "\"\(names.randomElement(using: &g)!)\":\(value(&g, depth: depth))" }.joined(separator: ",") + "}"
    }

    @Test("random frames")
    func differential() {
        var g = SeededGenerator(state: 42)
        var kinds: [String: (Int, String)] = [:]
        var seen = 0
        for _ in 0..<50_000 {
            var text = "{\"op\":\"ping\",\"args\":\(Self.object(&g, depth: 1)),\"zz\":\(Self.value(&g, depth: 1))}"
            if Bool.random(using: &g) {
                var bytes = Array(text.utf8)
                let at = Int.random(in: 0..<bytes.count, using: &g)
                let special = Array("{}[],:\"\\ 0e-".utf8)
                switch Int.random(in: 0..<3, using: &g) {
                case 0: bytes.remove(at: at)
                case 1: bytes.insert(special.randomElement(using: &g)!, at: at)
                default: bytes[at] = special.randomElement(using: &g)!
                }
                text = String(decoding: bytes, as: UTF8.self)
            }
            var general: String?
            do { _ = try JSONValue.parse(ByteBuffer(string: text)) } catch { general = error.message }
            var request: String?
            do { _ = try Request.parse(ByteBuffer(string: text)) } catch { request = error.error.message }
            let requestIsJSON = request.map { $0.hasPrefix("invalid JSON") || $0.hasPrefix("payload") } ?? false
            let mismatch: String?
            if let general, request != general {
                mismatch = (request?.contains("duplicate member") == true ? "request says duplicate; general: " : "other; general: ")
                    + general.replacing(/byte \d+/, with: "byte N")
            } else if general == nil, requestIsJSON {
                mismatch = "general accepts; request refuses as JSON: " + request!
            } else {
                mismatch = nil
            }
            if let mismatch {
                seen += 1
                let kind = String(mismatch.prefix(90))
                kinds[kind] = (kinds[kind]?.0 ?? 0) + 1 == 1 ? (1, text) : ((kinds[kind]?.0 ?? 0) + 1, kinds[kind]!.1)
            }
        }
        for (kind, (count, example)) in kinds.sorted(by: { $0.key < $1.key }) {
            Issue.record("\(count) frames: \(kind); for example \(example)")
        }
        #expect(seen == 0)
    }
}

extension RequestDifferentialTests {
    @Test("random accepted frames: sentArgs reads what the general parser built")
    func acceptedReads() throws {
        var g = SeededGenerator(state: 7)
        var accepted = 0
        for _ in 0..<50_000 {
            let text = "{\"op\":\"ping\",\"args\":\(Self.object(&g, depth: 1))}"
            guard case .object(let envelope)? = try? JSONValue.parse(ByteBuffer(string: text)),
                case .object(let args)? = envelope["args"],
                let request = try? Request.parse(ByteBuffer(string: text)) else { continue }
            accepted += 1
            guard let sent = request.sentArgs else {
                Issue.record("no sentArgs: \(text)")
                continue
            }
            #expect(sent.count == args.count, "\(text)")
            #expect(sent.dictionary == args, "\(text)")
            #expect(request.owned.sentArgs?.dictionary == args, "\(text)")
            for (name, value) in args { #expect(sent.value(of: name) == value, "\(name) in \(text)") }
        }
        #expect(accepted > 1000)
    }
}
