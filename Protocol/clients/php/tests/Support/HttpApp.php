<?php

declare(strict_types=1);

namespace Keyhole\Tests\Support;

/**
 * An app under example/serve.php (PHP's built-in server), spoken to over real HTTP.
 */
final class HttpApp
{
    public Process $process;
    public int $port;

    public function __construct(string $frontController, array $env)
    {
        $env = array_merge(getenv(), ['PORT' => '0'], $env);
        $this->process = new Process([PHP_BINARY, dirname(__DIR__, 2) . '/example/serve.php', $frontController], $env);
        $line = $this->process->readLine(30.0);
        if (preg_match('/^listening (\d+)$/', $line, $m) !== 1) {
            throw new \RuntimeException("serve.php said '$line'");
        }
        $this->port = (int)$m[1];
    }

    /**
     * One HTTP/1.0 request over a plain TCP connection.
     *
     * @param array<string, string> $headers
     * @return array{status: int, headers: array<string, list<string>>, body: string}
     */
    public function request(string $method, string $path, array $headers = [], ?string $body = null): array
    {
        $conn = stream_socket_client("tcp://127.0.0.1:{$this->port}", $errno, $errstr, 10);
        if ($conn === false) {
            throw new \RuntimeException("cannot connect to the app: $errstr");
        }
        stream_set_timeout($conn, 30);
        $text = "$method $path HTTP/1.0\r\nHost: 127.0.0.1:{$this->port}\r\nConnection: close\r\n";
        if ($body !== null) {
            $headers += ['Content-Type' => 'application/x-www-form-urlencoded'];
            $headers['Content-Length'] = (string)strlen($body);
        }
        foreach ($headers as $name => $value) {
            $text .= "$name: $value\r\n";
        }
        fwrite($conn, $text . "\r\n" . ($body ?? ''));
        $raw = stream_get_contents($conn);
        fclose($conn);
        [$head, $content] = explode("\r\n\r\n", $raw, 2) + [1 => ''];
        $lines = explode("\r\n", $head);
        preg_match('/^HTTP\/\d\.\d (\d{3})/', array_shift($lines), $m);
        $parsed = [];
        foreach ($lines as $line) {
            [$name, $value] = explode(':', $line, 2);
            $parsed[strtolower(trim($name))][] = trim($value);
        }
        return ['status' => (int)$m[1], 'headers' => $parsed, 'body' => $content];
    }

    public function stop(): void
    {
        $this->process->kill();
    }
}
