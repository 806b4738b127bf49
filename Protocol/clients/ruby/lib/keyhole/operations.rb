# frozen_string_literal: true

module Keyhole
  # Every operation of PROTOCOL.md section 7, as Protocol/ops.json lists it: its access group (nil for
  # ping, which anyone may use), whether the client may send it again after the connection ended
  # with it written but unanswered (section 8), and whether it is a debug operation. The tests check
  # this copy against ops.json, member for member.
  OPERATIONS = {
    "ping" => { group: nil, safe_to_repeat: true, debug: false },
    "stats" => { group: "admin", safe_to_repeat: true, debug: false },
    "token.verify" => { group: "verify", safe_to_repeat: true, debug: false },
    "jwks.status" => { group: "verify", safe_to_repeat: true, debug: false },
    "jwks.refresh" => { group: "admin", safe_to_repeat: false, debug: false },
    "session.create" => { group: "session", safe_to_repeat: false, debug: false },
    "session.get" => { group: "session", safe_to_repeat: true, debug: false },
    "session.revoke" => { group: "session", safe_to_repeat: true, debug: false },
    "session.revoke_all" => { group: "session", safe_to_repeat: false, debug: false },
    "session.list" => { group: "session", safe_to_repeat: true, debug: false },
    "user.get" => { group: "session", safe_to_repeat: true, debug: false },
    "user.update" => { group: "admin", safe_to_repeat: false, debug: false },
    "user.delete" => { group: "admin", safe_to_repeat: false, debug: false },
    "apple.sign_in" => { group: "signin", safe_to_repeat: false, debug: false },
    "apple.notification" => { group: "signin", safe_to_repeat: false, debug: false },
    "apple.refresh_check" => { group: "admin", safe_to_repeat: false, debug: false },
    "apple.transfer.export" => { group: "admin", safe_to_repeat: false, debug: false },
    "apple.transfer.import" => { group: "admin", safe_to_repeat: false, debug: false },
    "apple.pending" => { group: "admin", safe_to_repeat: true, debug: false },
    "apple.authorize" => { group: "signin", safe_to_repeat: false, debug: false },
    "apple.callback" => { group: "signin", safe_to_repeat: false, debug: false },
    "admin.snapshot" => { group: "admin", safe_to_repeat: false, debug: false },
    "admin.reload" => { group: "admin", safe_to_repeat: false, debug: false },
    "debug.sleep" => { group: "admin", safe_to_repeat: true, debug: true },
    "debug.echo" => { group: "admin", safe_to_repeat: true, debug: true },
    "debug.block" => { group: "admin", safe_to_repeat: false, debug: true },
    "debug.advance_clock" => { group: "admin", safe_to_repeat: false, debug: true }
  }.each_value(&:freeze).freeze

  # True when +op+ may be sent again after its connection was lost unanswered. An operation this
  # client does not know is not.
  def self.safe_to_repeat?(op)
    entry = OPERATIONS[op]
    entry ? entry[:safe_to_repeat] : false
  end
end
