extension WALRecovery {
    /// Corruption in `files[index]` (whose `bytes`, when read) at `offset`: an error, or with
    /// `repair`, a cut there that drops the rest of that segment and every later one.
    static func fail(
        _ plan: inout Plan, _ files: [(sequence: UInt64, path: String)], _ read: (Int) throws(StoreError) -> [UInt8],
        from index: Int, bytes: [UInt8]?, offset: Int, repair: Bool, path: String, reason: String
    ) throws(StoreError) {
        guard repair else { throw StoreError.corrupt(file: path, offset: offset, reason) }
        plan.repaired = true
        if offset > 0 {
            plan.truncate = (files[index].sequence, offset)
        } else {
            plan.remove.append(files[index].sequence)
        }
        plan.remove += files[(index + 1)...].map(\.sequence)
        // What can still be counted: whole records after the cut in this segment and the later ones.
        var lost = 0
        for position in index..<files.count {
            let segment: [UInt8]
            if position == index, let bytes { segment = bytes } else { segment = try read(position) }
            let start = position == index ? offset : 0
            lost += countRecords(segment, from: max(start, WALSegmentHeader.size))
        }
        plan.lostRecords = lost
        plan.warnings.append("\(path): cut at offset \(offset) (\(reason)); \(lost) records lost")
    }

    /// Records that still parse (length and bounds, CRC not checked: the LSNs are unknown) from `offset`,
    /// stepping over batch headers (whose marker never starts a record).
    private static func countRecords(_ bytes: [UInt8], from offset: Int) -> Int {
        var offset = offset
        var count = 0
        while offset + WALRecord.headerBytes <= bytes.count {
            // A batch header, or what is left of one (its marker): step over it.
            if bytes[offset..<(offset + 4)].elementsEqual(WALBatchHeader.marker) {
                offset += WALBatchHeader.size
                continue
            }
            let length = Int(bytes.bigEndianUInt32(at: offset))
            guard length >= 1, length <= WALRecord.maximumBodyBytes, offset + WALRecord.headerBytes + length <= bytes.count
            else { break }
            count += 1
            offset += WALRecord.headerBytes + length
        }
        return count
    }
}
