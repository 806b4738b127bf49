import Logging
import Testing

@testable import KeyholeServer

/// `RequestContext` keeps its parts in one shared object (a connection hands the same one to every
/// request): it must still behave as a value.
@Suite("Request context")
struct RequestContextTests {
    @Test("a copy changed leaves the original as it was; setting one part keeps the other")
    func valueSemantics() {
        var logger = Logger(label: "test.context")
        logger[metadataKey: "peer_uid"] = "33"
        let original = RequestContext(logger: logger, peerUID: 33)

        var copy = original
        copy.peerUID = 7
        #expect(copy.peerUID == 7)
        #expect(copy.logger[metadataKey: "peer_uid"] == "33")
        #expect(original.peerUID == 33)

        var relabelled = Logger(label: "test.other")
        relabelled[metadataKey: "peer_uid"] = "7"
        copy.logger = relabelled
        #expect(copy.logger.label == "test.other")
        #expect(copy.logger[metadataKey: "peer_uid"] == "7")
        #expect(copy.peerUID == 7)
        #expect(original.logger.label == "test.context")
        #expect(original.logger[metadataKey: "peer_uid"] == "33")
    }

    @Test("made without a peer, the uid is nil")
    func noPeer() {
        #expect(RequestContext(logger: Logger(label: "test")).peerUID == nil)
    }
}
