<?php

declare(strict_types=1);

namespace Keyhole\Tests\Support;

/**
 * A real keyholed under Protocol/testing/keyholed_harness.py ($KEYHOLED, else .build/debug/keyholed).
 */
final class Harness
{
    public Process $process;
    public string $socket;
    public string $token;
    public string $issuer;
    public string $sub;
    public string $audience;

    public function __construct(string $configExtra = '')
    {
        $command = ['python3', Paths::protocol('testing/keyholed_harness.py')];
        if ($configExtra !== '') {
            array_push($command, '--config-extra', $configExtra);
        }
        $this->process = new Process($command);
        $hello = json_decode($this->process->readLine(90.0), true, 512, JSON_THROW_ON_ERROR);
        $this->socket = $hello['socket'];
        $this->token = $hello['token'];
        $this->issuer = $hello['issuer'];
        $this->sub = $hello['sub'];
        $this->audience = $hello['audience'];
    }

    /**
     * A keyholed whose Apple audience (the harness's token's) is a web client with $redirectUri as
     * its redirect URI. The audience is known from a harness's ready line: one harness to read it,
     * then the one configured with it.
     */
    public static function withAppleWeb(string $redirectUri): self
    {
        $probe = new self();
        $audience = $probe->audience;
        if ($probe->stop() !== 0) {
            throw new \RuntimeException('keyholed_harness (probe) did not stop cleanly');
        }
        $flags = JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_THROW_ON_ERROR;
        return new self("[apple]\nredirect_uris = { " . json_encode($audience, $flags) . ' = ' . json_encode($redirectUri, $flags) . " }\n");
    }

    /** Sends a command and returns its JSON answer line. */
    public function command(string $line): array
    {
        $this->process->write($line . "\n");
        return json_decode($this->process->readLine(120.0), true, 512, JSON_THROW_ON_ERROR);
    }

    /** The chaos line, if it has come (without waiting). */
    public function chaosLine(): ?array
    {
        if (!$this->process->hasLine()) {
            return null;
        }
        return json_decode($this->process->readLine(1.0), true, 512, JSON_THROW_ON_ERROR);
    }

    /** Stops keyholed; the harness's exit status (0: every keyholed exited 0 after SIGTERM). */
    public function stop(): int
    {
        $this->process->write("stop\n");
        $this->process->closeStdin();
        return $this->process->wait(60.0);
    }
}
