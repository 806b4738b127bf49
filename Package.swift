// swift-tools-version:6.2
import PackageDescription

/// Release builds of keyholed's targets on the request path skip Swift's run-time exclusivity checks
/// (a thread-local access set consulted on every access to a class's stored `var`: about 5% of a
/// ping's server CPU, BENCHMARKS.md). Debug builds, and so every test in `make test`, keep them: an
/// overlapping access there still traps. Not KeyholeProtocol: the Swift client's users build it too.
let requestPath: [SwiftSetting] = [.unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release))]

let package = Package(
    name: "keyhole",
    products: [
        .library(name: "KeyholeProtocol", targets: ["KeyholeProtocol"]),
        .library(name: "KeyholeClient", targets: ["KeyholeClient"]),
        .library(name: "KeyholeServer", targets: ["KeyholeServer"]),
        .library(name: "KeyholeJOSE", targets: ["KeyholeJOSE"]),
        .library(name: "KeyholeIssuers", targets: ["KeyholeIssuers"]),
        .library(name: "KeyholeStore", targets: ["KeyholeStore"]),
        .library(name: "KeyholeSystemd", targets: ["KeyholeSystemd"]),
        .executable(name: "keyholed", targets: ["keyholed"]),
        .executable(name: "keyhole", targets: ["keyhole"]),
        .executable(name: "keyhole-bench", targets: ["keyhole-bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/LebJe/TOMLKit.git", from: "0.6.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.2.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
    ],
    targets: [
        .systemLibrary(
            name: "CKeyholeOpenSSL",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        .systemLibrary(name: "CKeyholeLinux"),
        // C++'s operator delete for what TOMLKit's C interface made with new (ConfigFile).
        .target(name: "CKeyholeTOML"),
        .systemLibrary(
            name: "CKeyholeSystemd",
            pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        .target(
            name: "KeyholeSystemd",
            dependencies: [
                "CKeyholeSystemd",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            name: "KeyholeJOSE",
            dependencies: ["CKeyholeOpenSSL", "KeyholeProtocol", .product(name: "NIOCore", package: "swift-nio")]
        ),
        .target(
            name: "KeyholeIssuers",
            dependencies: [
                "KeyholeJOSE", "KeyholeProtocol", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            exclude: ["KeySetStore.md"]
        ),
        .target(
            name: "KeyholeStore",
            dependencies: [
                "KeyholeJOSE", "KeyholeProtocol",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            exclude: ["WAL.md", "WALRecordTypes.md", "SNAPSHOT.md"],
            swiftSettings: requestPath
        ),
        // Users and sessions in PostgreSQL, for several hosts (Sources/KeyholePostgres/POSTGRES.md).
        .target(
            name: "KeyholePostgres",
            dependencies: [
                "KeyholeStore", "KeyholeProtocol", "KeyholeJOSE",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            exclude: ["POSTGRES.md"]
        ),
        .target(
            name: "KeyholeApple",
            dependencies: [
                "KeyholeIssuers", "KeyholeJOSE", "KeyholeProtocol",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        .target(
            name: "KeyholeProtocol",
            dependencies: [.product(name: "NIOCore", package: "swift-nio")]
        ),
        // keyholed's own event loop for its Unix socket (Sources/KeyholeServer/REQUEST_LOOP.md): epoll,
        // no channel pipeline; it knows bytes and connections, KeyholeServer knows frames and operations.
        .target(
            name: "KeyholeSocketLoop",
            dependencies: ["CKeyholeLinux", .product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: requestPath
        ),
        .target(
            name: "KeyholeServer",
            dependencies: [
                "KeyholeSocketLoop",
                "KeyholeApple",
                "KeyholeProtocol",
                "KeyholeIssuers",
                "KeyholeJOSE",
                "KeyholeStore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            exclude: ["APPLE_WEB.md", "REQUEST_LOOP.md"],
            swiftSettings: requestPath
        ),
        .target(
            name: "KeyholeMetrics",
            dependencies: [
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            exclude: ["METRICS.md"]
        ),
        .target(
            name: "KeyholeHTTP",
            dependencies: [
                "KeyholeServer", "KeyholeStore", "KeyholeProtocol",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            exclude: ["HTTP.md"]
        ),
        .target(
            name: "KeyholeClient",
            dependencies: [
                "KeyholeProtocol",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            exclude: ["README.md"]
        ),
        .executableTarget(
            name: "keyholed",
            dependencies: [
                "KeyholePostgres",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                "KeyholeApple",
                "KeyholeSystemd",
                "KeyholeServer",
                "KeyholeSocketLoop",
                "KeyholeHTTP",
                "KeyholeMetrics",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                "KeyholeStore",
                "KeyholeIssuers",
                "KeyholeJOSE",
                "KeyholeProtocol",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                // For its C module, CTOML (toml++), which ConfigFile calls directly: TOMLKit's Swift
                // interface leaks what it reads.
                .product(name: "TOMLKit", package: "TOMLKit"),
                "CKeyholeTOML",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ]
        ),
        .executableTarget(
            name: "keyhole",
            dependencies: [
                "KeyholeClient",
                "KeyholeProtocol",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "keyhole-bench",
            dependencies: [
                "CKeyholeLinux",
                "KeyholeProtocol",
                "KeyholeJOSE",
                "KeyholeServer",
                "KeyholeStore",
                "KeyholeApple",
                "KeyholeMetrics",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
            ]
        ),
        // libFuzzer targets for the decoders (Sources/keyhole-fuzz/main.swift, `make fuzz`); without
        // -DKEYHOLE_FUZZ it only says how to build it, so that release builds of every product work.
        .executableTarget(
            name: "keyhole-fuzz",
            dependencies: ["KeyholeProtocol", "KeyholeJOSE", "KeyholeStore", .product(name: "NIOCore", package: "swift-nio")]
        ),
        .target(
            name: "KeyholeTestSupport",
            dependencies: [
                "KeyholeProtocol", "KeyholeIssuers", "KeyholeJOSE", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            path: "Tests/KeyholeTestSupport"
        ),
        .testTarget(
            name: "KeyholeProtocolTests",
            dependencies: ["KeyholeProtocol", "KeyholeTestSupport", .product(name: "NIOCore", package: "swift-nio")]
        ),
        .testTarget(
            name: "KeyholeJOSETests",
            dependencies: ["KeyholeJOSE", "KeyholeProtocol", "KeyholeTestSupport", .product(name: "NIOCore", package: "swift-nio")],
            resources: [.copy("Fixtures")]
        ),
        .testTarget(
            name: "KeyholeIssuersTests",
            dependencies: [
                "KeyholeIssuers", "KeyholeJOSE", "KeyholeProtocol", "KeyholeTestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "KeyholeAppleTests",
            dependencies: ["KeyholeApple", "KeyholeJOSE", "KeyholeProtocol", "KeyholeTestSupport", .product(name: "NIOCore", package: "swift-nio")]
        ),
        .testTarget(
            name: "KeyholeStoreTests",
            dependencies: [
                "KeyholeStore", "KeyholeProtocol", "KeyholeTestSupport", .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "KeyholePostgresTests",
            dependencies: [
                "KeyholePostgres", "KeyholeTestSupport",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "KeyholeSocketLoopTests",
            dependencies: ["KeyholeSocketLoop", "KeyholeTestSupport", .product(name: "NIOCore", package: "swift-nio")]
        ),
        .testTarget(
            name: "KeyholeServerTests",
            dependencies: [
                "KeyholeServer", "KeyholeProtocol", "KeyholeIssuers", "KeyholeJOSE", "KeyholeStore", "KeyholeApple",
                "KeyholeTestSupport", .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "KeyholeMetricsTests",
            dependencies: [
                "KeyholeMetrics", .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        .testTarget(
            name: "KeyholeHTTPTests",
            dependencies: [
                "KeyholeHTTP", "KeyholeServer", "KeyholeStore", "KeyholeProtocol", "KeyholeTestSupport",
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"), .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .testTarget(
            name: "KeyholeClientTests",
            dependencies: [
                "KeyholeClient", "KeyholeServer", "KeyholeProtocol", "KeyholeTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .testTarget(
            name: "KeyholeSystemdTests",
            dependencies: ["KeyholeSystemd", "KeyholeTestSupport", .product(name: "Logging", package: "swift-log")]
        ),
        .testTarget(
            name: "KeyholedTests",
            dependencies: [
                "keyholed", "KeyholeClient", "KeyholeProtocol", "KeyholeJOSE", "KeyholeServer", "KeyholeStore", "KeyholeTestSupport",
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
    ]
)
