import Foundation
import KeyholeProtocol
import NIOCore

/// The shared vectors of Protocol/vectors, which the Python tests run too.
package enum Vectors {
    package static let directory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Protocol/vectors")

    package static func load(_ name: String) throws -> [JSONValue] {
        let data = try Data(contentsOf: directory.appendingPathComponent(name))
        guard case .array(let cases)? = try JSONValue.parse(ByteBuffer(bytes: data))["cases"] else {
            throw RawConnection.Failure(description: "\(name) has no cases")
        }
        return cases
    }
}
