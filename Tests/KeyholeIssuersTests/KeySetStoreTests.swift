import Foundation
import KeyholeIssuers
import KeyholeJOSE
import Testing

@Suite("KeySetStore")
struct KeySetStoreTests {
    let stateDirectory: URL
    let store: KeySetStore
    let issuer: IssuerConfiguration
    let document: [UInt8]

    init() throws {
        stateDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("khstore-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: stateDirectory, withIntermediateDirectories: true)
        store = KeySetStore(stateDirectory: stateDirectory.path)
        issuer = IssuerPreset.apple.configuration(name: "apple", audiences: ["com.example"])
        document = Array(try Data(contentsOf: IssuerRegistryTests.apple.appendingPathComponent("apple_jwks_panva-wellknown-20241001.json")))
    }

    func cleanUp() { try? FileManager.default.removeItem(at: stateDirectory) }

    @Test("a saved key set loads back with its keys and times; no temporary file is left; modes 0600 and 0700")
    func roundTrip() throws {
        defer { cleanUp() }
        #expect(try store.load(issuer) == nil)
        try store.save(document, for: issuer, fetchedAt: 1_730_673_618.5, expiresAt: 1_730_677_218.5)
        let entry = try #require(try store.load(issuer))
        #expect(entry.keys.keys.compactMap(\.kid) == (try JWKSet(json: document)).keys.compactMap(\.kid))
        #expect(entry.fetchedAt == 1_730_673_618.5)
        #expect(entry.expiresAt == 1_730_677_218.5)
        let directory = stateDirectory.appendingPathComponent("jwks")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["apple.json"])
        #expect(try FileManager.default.attributesOfItem(atPath: directory.path)[.posixPermissions] as? Int == 0o700)
        #expect(try FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent("apple.json").path)[.posixPermissions] as? Int == 0o600)
        // Another key-set URL for the same issuer: the file is not used.
        var moved = issuer
        moved.keySet = .url("https://keys.example/apple")
        #expect(throws: KeySetStore.Failure.self) { try store.load(moved) }
        // Saving again replaces the file whole.
        try store.save(Array(#"{"keys":[]}"#.utf8), for: issuer, fetchedAt: 2, expiresAt: 3)
        #expect(try store.load(issuer)?.keys.keys.isEmpty == true)
    }

    @Test("a damaged, foreign or oversized file is refused with an error, never a crash, and never used", arguments: [
        "not json", #"{"format":2}"#, #"{"format":1,"issuer":"google","iss":"https://appleid.apple.com","fetched_at":1,"expires_at":2,"jwks":{"keys":[]}}"#,
        #"{"format":1,"issuer":"apple","iss":"https://evil.example","fetched_at":1,"expires_at":2,"jwks":{"keys":[]}}"#,
        #"{"format":1,"issuer":"apple","iss":"https://appleid.apple.com","source":"https://appleid.apple.com/auth/keys","fetched_at":"1","expires_at":2,"jwks":{"keys":[]}}"#,
        #"{"format":1,"issuer":"apple","iss":"https://appleid.apple.com","source":"https://appleid.apple.com/auth/keys","fetched_at":1,"expires_at":2,"jwks":{"kees":[]}}"#,
        #"{"format":1,"issuer":"apple","iss":"https://appleid.apple.com","source":"https://old.example/keys","fetched_at":1,"expires_at":2,"jwks":{"keys":[]}}"#,
        String(repeating: " ", count: 3 << 20),
    ])
    func damaged(content: String) throws {
        defer { cleanUp() }
        let directory = stateDirectory.appendingPathComponent("jwks")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try content.write(to: directory.appendingPathComponent("apple.json"), atomically: true, encoding: .utf8)
        #expect(throws: KeySetStore.Failure.self) { try store.load(issuer) }
    }

    @Test("a temporary file left by a crash does not disturb loading")
    func crashLeftovers() throws {
        defer { cleanUp() }
        try store.save(document, for: issuer, fetchedAt: 1, expiresAt: 2)
        let directory = stateDirectory.appendingPathComponent("jwks")
        try "{\"format\":1,\"trunc".write(to: directory.appendingPathComponent("apple.json.tmp"), atomically: true, encoding: .utf8)
        #expect(try store.load(issuer)?.fetchedAt == 1)
    }

    @Test("a key set that is not a JSON object is not saved")
    func refusesGarbage() throws {
        defer { cleanUp() }
        #expect(throws: KeySetStore.Failure.self) { try store.save(Array("[]".utf8), for: issuer, fetchedAt: 1, expiresAt: 2) }
        #expect(try store.load(issuer) == nil)
    }
}
