import KeyholeProtocol
import Testing

@testable import KeyholeHTTP

@Suite struct RequireConditionTests {
    @Test func conditionsParseFromTheQuery() throws {
        let conditions = try RequireCondition.parse(query: "require=role:admin&require=staff&require=team%3Aa+b")
        #expect(conditions == [
            RequireCondition(key: "role", value: "admin"), RequireCondition(key: "staff", value: nil),
            RequireCondition(key: "team", value: "a b"),
        ])
        #expect(try RequireCondition.parse(query: "") == [])
        #expect(try RequireCondition.parse(query: "require=k:") == [RequireCondition(key: "k", value: "")])
    }

    @Test func malformedQueriesAreRefused() {
        for query in ["session=x", "require=", "require=bad%zz", "require=%", "require=a%20b", "require=:x",
                      "require=" + String(repeating: "k", count: 65), "require=k:" + String(repeating: "v", count: 300),
                      "require=k:%FF", Array(repeating: "require=k", count: 9).joined(separator: "&")] {
            #expect(throws: RequireCondition.Refusal.self, "\(query)") { try RequireCondition.parse(query: query[...]) }
        }
    }

    @Test func conditionsHoldOnTheDataByBytes() throws {
        guard case .object(let data) = try JSONValue.parse(bytes: Array(#"{"role":"admin","staff":true,"no":false,"teams":["a","b"],"n":1,"Kelvin":"x"}"#.utf8)) else {
            Issue.record("not an object")
            return
        }
        #expect(RequireCondition(key: "role", value: "admin").holds(in: data))
        #expect(!RequireCondition(key: "role", value: "Admin").holds(in: data))
        #expect(!RequireCondition(key: "role", value: nil).holds(in: data))
        #expect(RequireCondition(key: "staff", value: nil).holds(in: data))
        #expect(!RequireCondition(key: "no", value: nil).holds(in: data))
        #expect(RequireCondition(key: "teams", value: "b").holds(in: data))
        #expect(!RequireCondition(key: "teams", value: "c").holds(in: data))
        #expect(!RequireCondition(key: "n", value: "1").holds(in: data))
        #expect(!RequireCondition(key: "missing", value: nil).holds(in: nil))
        // "\u{212A}elvin" (KELVIN SIGN) is canonically equivalent to "Kelvin": a String lookup finds
        // the member, the bytes do not match it.
        guard case .object(let kelvin) = try JSONValue.parse(bytes: Array("{\"\u{212A}ey\":true}".utf8)) else { return }
        #expect(!RequireCondition(key: "Key", value: nil).holds(in: kelvin))
    }
}
