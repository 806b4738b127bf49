import Foundation
import NIOCore
import Synchronization
import Testing

/// A suite trait for tests that block a thread while they wait (on keyholed's answers, a child
/// process, a datagram): the suite runs on threads of its own (`GrowingThreadPool`), and only so many
/// places (`OwnThreadsTrait.width`) are held at once by such suites and tests.
///
/// Without it, a blocking test holds one of the cooperative threads every test's tasks share, as
/// many as the machine has cores: two here. With two such tests waiting, no other test's task ran
/// at all: CI saw every suite of pure computation finish only after 40 to 60 seconds, and a test
/// that bounds a call at 60 s fail, its call having waited all that while to be run. The width keeps
/// what the cooperative threads used to bound by accident: how many keyholed processes the tests
/// start at once on a small machine.
///
/// Where places are taken:
/// - A suite with `.serialized` of its own takes one for the whole of it: its tests run one at a
///   time anyway. (A parent's `.serialized` is not among a nested suite's traits, which then takes
///   a place per test case, one after another: correct, only more turns in the queue.)
/// - Otherwise each test case takes its own, so a suite whose tests run at once counts as many.
/// - Except a test case with a time limit: the limit counts from before its scope is entered, so
///   one queued for a place would spend its limit waiting (four such tests failed so). It runs on
///   the pool without a place; there are few, and the limit bounds them. A time limit on a suite
///   that is not serialized would give every one of its tests one, so none would take a place:
///   such a suite is refused (an issue recorded), to be serialized or limited test by test.
package struct OwnThreadsTrait: SuiteTrait, TestTrait, TestScoping {
    /// How many places suites and tests with this trait hold at once: `KEYHOLE_TEST_BLOCKING_WIDTH`,
    /// or three times the processors.
    package static let width: Int = {
        if let text = ProcessInfo.processInfo.environment["KEYHOLE_TEST_BLOCKING_WIDTH"], let value = Int(text), value > 0 {
            return value
        }
        return 3 * ProcessInfo.processInfo.activeProcessorCount
    }()

    /// The places all suites with the trait share.
    package static let admission = TestAdmission(width: width)

    /// The place held by the suite or test the caller runs in (its number, counting admissions from
    /// 1), or nil: inside it, a nested suite or test with the trait takes no second place.
    @TaskLocal package static var place: Int?

    /// Whether the caller runs inside a suite or test that holds a place.
    package static var admitted: Bool { place != nil }

    private static let admissions = Atomic<Int>(0)

    package var isRecursive: Bool { true }

    /// For a suite, once for the whole of it; for each test case, which goes on in the place its
    /// suite took, or takes one of its own (see the type's comment).
    package func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        test.isSuite || testCase != nil ? self : nil
    }

    package func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        let serializedSuite = test.isSuite && Self.isSerialized(test)
        if test.isSuite, Self.place == nil, !serializedSuite, test.timeLimit != nil {
            Issue.record(
                "\(test.name): a suite with .ownThreads and a time limit must be .serialized; else its tests, each limited, take no places and nothing bounds them")
        }
        let needsPlace = Self.place == nil && (test.isSuite ? serializedSuite : test.timeLimit == nil)
        guard needsPlace else {
            try await withTaskExecutorPreference(GrowingThreadPool.shared) { try await function() }
            return
        }
        await Self.admission.enter()
        defer { Self.admission.leave() }
        let number = Self.admissions.add(1, ordering: .relaxed).newValue
        try await Self.$place.withValue(number) {
            try await withTaskExecutorPreference(GrowingThreadPool.shared) {
                try await function()
            }
        }
    }

    /// Whether a suite's tests run one at a time by its own `.serialized`.
    private static func isSerialized(_ suite: Test) -> Bool {
        suite.traits.contains { $0 is ParallelizationTrait }
    }
}

extension Trait where Self == OwnThreadsTrait {
    /// The suite or test runs on threads of its own, in one of a few places (`OwnThreadsTrait`).
    package static var ownThreads: Self { Self() }
}

/// A counting semaphore for tasks: `enter` waits, without holding a thread, until one of `width`
/// places is free; places are handed out first come, first served.
package final class TestAdmission: Sendable {
    private struct State {
        var free: Int
        var waiting = CircularBuffer<CheckedContinuation<Void, Never>>()
    }

    private let state: Mutex<State>

    package init(width: Int) {
        precondition(width > 0, "an admission needs at least one place")
        state = Mutex(State(free: width))
    }

    package func enter() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let admitted = state.withLock { state in
                if state.free > 0 {
                    state.free -= 1
                    return true
                }
                state.waiting.append(continuation)
                return false
            }
            if admitted { continuation.resume() }
        }
    }

    package func leave() {
        let next: CheckedContinuation<Void, Never>? = state.withLock { state in
            guard let next = state.waiting.popFirst() else {
                state.free += 1
                return nil
            }
            return next
        }
        next?.resume()
    }

    /// Places free now, for tests.
    package var free: Int { state.withLock { $0.free } }

    /// Tasks waiting for a place now, for tests.
    package var waiting: Int { state.withLock { $0.waiting.count } }
}
