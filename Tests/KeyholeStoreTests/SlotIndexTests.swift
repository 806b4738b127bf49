import KeyholeTestSupport
import Testing
@testable import KeyholeStore

/// The slot index against a dictionary doing the same, through growth and deletions that shift
/// runs back, including runs that wrap around the end of the table.
@Suite("Slot index")
struct SlotIndexTests {
    struct Element: SlotIndexed {
        var id: SessionID
        var indexKey: SessionID { id }
    }

    struct Named: SlotIndexed {
        var key: Principal
        var indexKey: Principal { key }
    }

    /// Random inserts and removes, checked after each step against a model. `highs` few distinct high
    /// words make every id of one word share a home bucket: long runs, many shifts.
    func churn(highs: UInt64?, steps: Int, seed: UInt64) {
        var random = SeededGenerator(state: seed)
        var elements = SlotArray<Element>()
        var index = SlotIndex<SessionID>()
        var model: [SessionID: UInt32] = [:]
        for step in 0..<steps {
            if model.isEmpty || random.next() % 3 != 0 {
                let high = highs.map { random.next() % $0 } ?? random.next()
                let id = SessionID(high: high, low: UInt64(step))
                let slot = elements.insert(Element(id: id))
                index.insert(slot, in: elements)
                model[id] = slot
            } else {
                let id = model.keys.randomElement(using: &random)!
                let slot = index.remove(id, in: elements)
                #expect(slot == model[id])
                model[id] = nil
                elements.release(slot!)
            }
            if step % 97 == 0 || step == steps - 1 {
                #expect(index.count == model.count)
                for (id, slot) in model { #expect(index.find(id, in: elements) == slot) }
                // Ids never indexed, and ids removed, are not found.
                #expect(index.find(SessionID(high: 7, low: UInt64.max), in: elements) == nil)
            }
        }
        for (id, slot) in model { #expect(index.remove(id, in: elements) == slot) }
        #expect(index.count == 0)
        #expect(model.keys.allSatisfy { index.find($0, in: elements) == nil })
    }

    @Test("random ids: grows from 16 buckets and stays exact through removals")
    func randomIDs() { churn(highs: nil, steps: 5000, seed: 1) }

    @Test("colliding ids: long runs, backward shifts and wrap-around stay exact")
    func collidingIDs() {
        churn(highs: 3, steps: 3000, seed: 2)
        churn(highs: 40, steps: 3000, seed: 3)
    }

    @Test("reserve makes room once, and the sessions indexed before stay found")
    func reserve() {
        var elements = SlotArray<Element>()
        var index = SlotIndex<SessionID>()
        let ids = (0..<100).map { SessionID(high: $0 &* 0x0123_4567_89AB_CDEF, low: $0) }
        for id in ids { index.insert(elements.insert(Element(id: id)), in: elements) }
        index.reserve(100_000)
        for (slot, id) in ids.enumerated() { #expect(index.find(id, in: elements) == UInt32(slot)) }
        #expect(index.remove(ids[5], in: elements) == 5)
        #expect(index.remove(ids[5], in: elements) == nil)
        #expect(index.count == 99)
    }

    @Test("principals: found by issuer and sub, through growth and removals")
    func principals() {
        var elements = SlotArray<Named>()
        var index = SlotIndex<Principal>()
        let keys = (0..<2000).map { Principal(issuer: $0 % 3 == 0 ? "apple" : "google", sub: "001234.\($0)") }
        for key in keys { index.insert(elements.insert(Named(key: key)), in: elements) }
        for (slot, key) in keys.enumerated() { #expect(index.find(key, in: elements) == UInt32(slot)) }
        // Same sub, other issuer: another principal.
        #expect(index.find(Principal(issuer: "local", sub: "001234.3"), in: elements) == nil)
        for (slot, key) in keys.enumerated() where slot % 2 == 0 { #expect(index.remove(key, in: elements) == UInt32(slot)) }
        for (slot, key) in keys.enumerated() {
            #expect(index.find(key, in: elements) == (slot % 2 == 0 ? nil : UInt32(slot)))
        }
        #expect(index.count == 1000)
    }
}
