#if KEYHOLE_FUZZ
@testable import KeyholeStore

/// Repairs of mutated store files, so that the fuzzer's mutations get past the checksums and reach the
/// decoders behind them (WAL.md and SNAPSHOT.md give the layouts). Each only rewrites bytes already
/// there: a file too short for what it fixes is left as it is.
enum StoreFixups {
    /// Segment header: the sequence set to 1 (the file's name in the target) and the CRC recomputed.
    static func walHeader(_ segment: inout [UInt8]) {
        guard segment.count >= WALSegmentHeader.size else { return }
        put(UInt64(1), at: 8, in: &segment)
        put(CRC32C.checksum(segment[0..<24]), at: 24, in: &segment)
    }

    /// Each record's CRC, over its LSN (counting from the header's first LSN) and its body, for as many
    /// records as have a valid length inside the segment.
    static func walRecords(_ segment: inout [UInt8]) {
        guard segment.count >= WALSegmentHeader.size else { return }
        var lsn = segment.bigEndianUInt64(at: 16)
        eachFramed(&segment, from: WALSegmentHeader.size) { _ in
            defer { lsn &+= 1 }
            return lsn
        }
    }

    /// The size of a snapshot's header by its format byte, when it has a whole one.
    private static func snapshotHeaderSize(_ file: [UInt8]) -> Int? {
        guard file.count >= SnapshotHeader.format1Size else { return nil }
        let size = file[7] == 1 ? SnapshotHeader.format1Size : SnapshotHeader.size
        return file.count >= size ? size : nil
    }

    /// Snapshot header: the CRC recomputed over the counts' end (format 1 or 2).
    static func snapshotHeader(_ file: inout [UInt8]) {
        guard let size = snapshotHeaderSize(file) else { return }
        put(CRC32C.checksum(file[0..<(size - 8)]), at: size - 8, in: &file)
    }

    /// Each entry's CRC, over its index in the file and its body.
    static func snapshotEntries(_ file: inout [UInt8]) {
        guard let size = snapshotHeaderSize(file) else { return }
        var index: UInt64 = 0
        eachFramed(&file, from: size) { _ in
            defer { index += 1 }
            return index
        }
    }

    /// The header's counts of principals, sessions and outbox entries (format 2), from the entries'
    /// type bytes.
    static func snapshotCounts(_ file: inout [UInt8]) {
        guard let size = snapshotHeaderSize(file) else { return }
        var counts: [UInt8: UInt64] = [:]
        eachFramed(&file, from: size, rewrite: false) { body in
            counts[body.first ?? 0, default: 0] += 1
            return 0
        }
        put(counts[0x21] ?? 0, at: 24, in: &file)
        put(counts[0x30] ?? 0, at: 32, in: &file)
        if size == SnapshotHeader.size { put(counts[0x40] ?? 0, at: 40, in: &file) }
    }

    /// Walks length-and-CRC framed bodies from `offset`, rewriting each CRC over the sequence number
    /// `sequence` returns for it and the body, until a length is not valid or runs past the end.
    private static func eachFramed(
        _ bytes: inout [UInt8], from offset: Int, rewrite: Bool = true, _ sequence: (ArraySlice<UInt8>) -> UInt64
    ) {
        var offset = offset
        while bytes.count - offset >= WALRecord.headerBytes {
            let length = Int(bytes.bigEndianUInt32(at: offset))
            let end = offset + WALRecord.headerBytes + length
            guard length >= 1, length <= WALRecord.maximumBodyBytes, end <= bytes.count else { return }
            let body = bytes[(offset + WALRecord.headerBytes)..<end]
            var crc = CRC32C()
            crc.update(bigEndian: sequence(body))
            crc.update(body)
            if rewrite { put(crc.value, at: offset + 4, in: &bytes) }
            offset = end
        }
    }

    private static func put<T: FixedWidthInteger>(_ value: T, at offset: Int, in bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.bigEndian) { bytes.replaceSubrange(offset..<offset + MemoryLayout<T>.size, with: $0) }
    }
}

/// A snapshot's entries as groups, for comparing two snapshots of the same tables: the outbox entries,
/// and each principal's entry with its sessions' entries. Order (of groups, and of sessions in a group)
/// and the CRCs, which depend on it, are left out: only what is stored counts.
struct SnapshotGroups: Equatable {
    var outbox: [[UInt8]] = []
    var principals: [[[UInt8]]] = []

    /// The groups of `entries`, framed as `StoreTargets` writes them (so always well formed).
    init(_ entries: [UInt8]) {
        var offset = 0
        while offset < entries.count {
            let end = offset + WALRecord.headerBytes + Int(entries.bigEndianUInt32(at: offset))
            let body = Array(entries[(offset + WALRecord.headerBytes)..<end])
            switch body.first {
            case 0x40: outbox.append(body)
            case 0x21: principals.append([body])
            default: principals[principals.count - 1].append(body)
            }
            offset = end
        }
        outbox.sort { $0.lexicographicallyPrecedes($1) }
        principals = principals.map { [$0[0]] + $0.dropFirst().sorted { $0.lexicographicallyPrecedes($1) } }
            .sorted { $0[0].lexicographicallyPrecedes($1[0]) }
    }
}
#endif
