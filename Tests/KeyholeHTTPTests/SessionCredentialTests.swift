import NIOHTTP1
import Testing

@testable import KeyholeHTTP

@Suite struct SessionCredentialTests {
    static let token = "kh_" + String(repeating: "aB3-_", count: 8) + "xyz"

    @Test func theTokenShapeIsKh_And43Base64URLCharacters() {
        #expect(Self.token.utf8.count == 46)
        #expect(SessionCredential.isToken(Self.token[...]))
        #expect(!SessionCredential.isToken((Self.token + "A")[...]))
        #expect(!SessionCredential.isToken(String(Self.token.dropLast())[...]))
        #expect(!SessionCredential.isToken(("kh_" + String(repeating: "+", count: 43))[...]))
        #expect(!SessionCredential.isToken(("KH_" + Self.token.dropFirst(3))[...]))
    }

    @Test func theBearerStartingKh_DecidesOverTheCookie() {
        let cookie: HTTPHeaders = ["Cookie": "kh_session=\(Self.token)"]
        #expect(SessionCredential.token(in: cookie, cookieName: "kh_session") == Self.token)
        var both = cookie
        both.add(name: "authorization", value: "bearer \(Self.token)")
        #expect(SessionCredential.token(in: both, cookieName: "kh_session") == Self.token)
        // A malformed bearer that starts like a token: no credential, the cookie is not tried.
        var bad = cookie
        bad.add(name: "Authorization", value: "Bearer kh_nope")
        #expect(SessionCredential.token(in: bad, cookieName: "kh_session") == nil)
        // Another scheme leaves the cookie to decide.
        var basic = cookie
        basic.add(name: "Authorization", value: "Basic dXNlcjpwYXNz")
        #expect(SessionCredential.token(in: basic, cookieName: "kh_session") == Self.token)
    }

    @Test func cookiesAreParsedFirstWinsByExactNameAroundMalformedPairs() {
        #expect(SessionCredential.cookie(named: "kh_session", in: "a=1; junk; kh_session=first; kh_session=second") == "first")
        #expect(SessionCredential.cookie(named: "kh_session", in: "kh_session=\"quoted\"") == "quoted")
        #expect(SessionCredential.cookie(named: "kh_session", in: "KH_SESSION=x; kh_sessionx=y") == nil)
        // A name canonically equivalent but not byte-equal does not match (K is U+212A KELVIN SIGN).
        #expect(SessionCredential.cookie(named: "Kh", in: "\u{212A}h=x") == nil)
        var headers: HTTPHeaders = ["Cookie": "theme=dark"]
        headers.add(name: "Cookie", value: "kh_session=\(Self.token)")
        #expect(SessionCredential.token(in: headers, cookieName: "kh_session") == Self.token)
        #expect(SessionCredential.token(in: ["Cookie": "kh_session=short"], cookieName: "kh_session") == nil)
        #expect(SessionCredential.token(in: [:], cookieName: "kh_session") == nil)
    }

    @Test func aHugeCookieHeaderIsOneLinearPass() {
        let header = String(repeating: "x=1; ", count: 3000) + "kh_session=\(Self.token)"
        #expect(SessionCredential.cookie(named: "kh_session", in: header).map(String.init) == Self.token)
    }
}
