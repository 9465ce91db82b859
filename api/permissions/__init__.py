"""What the caller may call: the policy's answer for every route rule, asked at once."""
