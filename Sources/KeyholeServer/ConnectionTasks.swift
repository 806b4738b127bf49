/// A connection's asynchronous operations still running: cancelled when the connection goes away.
struct ConnectionTasks {
    private var running: [UInt64: Task<Void, Never>] = [:]
    private var lastID: UInt64 = 0

    /// A new task's id.
    mutating func nextID() -> UInt64 {
        lastID += 1
        return lastID
    }

    mutating func add(_ id: UInt64, _ task: Task<Void, Never>) {
        running[id] = task
    }

    mutating func remove(_ id: UInt64) {
        running.removeValue(forKey: id)
    }

    mutating func cancelAll() {
        for task in running.values { task.cancel() }
        running = [:]
    }
}
