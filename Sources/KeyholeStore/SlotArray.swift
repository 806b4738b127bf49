/// Elements in a growable array whose freed slots are reused: a stable small index per element, so
/// that tables can refer to each other by `UInt32` instead of by key.
struct SlotArray<Element> {
    private(set) var elements: [Element] = []
    private var free: [UInt32] = []

    /// Stores `element` in a free slot, or a new one; returns the slot.
    mutating func insert(_ element: Element) -> UInt32 {
        if let slot = free.popLast() {
            elements[Int(slot)] = element
            return slot
        }
        elements.append(element)
        return UInt32(elements.count - 1)
    }

    /// Makes `slot` free for reuse (its element stays until then: callers drop what it owns).
    mutating func release(_ slot: UInt32) { free.append(slot) }

    /// Makes room for `count` elements in all (reserved pages cost no memory until used).
    mutating func reserve(_ count: Int) { elements.reserveCapacity(count) }

    /// Slots in use or free: every slot index is below this.
    var count: Int { elements.count }

    subscript(slot: UInt32) -> Element {
        // Read in place (a borrow), not copied: reading one member of an element must not retain its others.
        _read { yield elements[Int(slot)] }
        _modify { yield &elements[Int(slot)] }
    }
}
extension SlotArray: Sendable where Element: Sendable {}
