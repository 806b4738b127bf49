import NIOCore

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

extension JSONValue {
    /// Parses one JSON text (RFC 8259, UTF-8 without a byte order mark).
    ///
    /// - Throws: `bad_request` naming what is wrong.
    public static func parse(_ bytes: ByteBuffer) throws(ProtocolError) -> JSONValue {
        let view = bytes.readableBytesView
        // A BOM is not JSON (RFC 8259 section 8.1) and some parsers skip it silently: refuse it explicitly.
        if view.starts(with: [0xEF, 0xBB, 0xBF]) {
            throw .badRequest("payload starts with a byte order mark")
        }
        // Strings must be valid UTF-8 whatever the JSON parser tolerates.
        guard String(validating: view, as: UTF8.self) != nil else {
            throw .badRequest("payload is not valid UTF-8")
        }
        do {
            return try JSONDecoder().decode(JSONValue.self, from: Data(view))
        } catch {
            throw .badRequest("payload is not valid JSON")
        }
    }
}
