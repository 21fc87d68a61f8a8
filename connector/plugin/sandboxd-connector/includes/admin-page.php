<?php
/**
 * Tools → Sandbox copy: settings, connection, and the copy's progress.
 *
 * @package SandboxdConnector
 */

if ( ! defined( 'ABSPATH' ) ) {
	exit;
}

/**
 * The admin page, its form handlers and its admin-ajax actions.
 */
class Sbx_Admin {

	const SLUG  = 'sandboxd-connector';
	const CAP   = 'manage_options';
	const NONCE = 'sbx_ajax';

	/**
	 * Hook everything (admin only; no nopriv ajax actions).
	 */
	public static function init() {
		add_action( 'admin_menu', array( __CLASS__, 'menu' ) );
		add_action( 'admin_init', array( __CLASS__, 'handle_request' ) );
		foreach ( array( 'start', 'step', 'cancel', 'login' ) as $a ) {
			add_action( 'wp_ajax_sbx_' . $a, array( __CLASS__, 'ajax_' . $a ) );
		}
	}

	/**
	 * Register the page under Tools.
	 */
	public static function menu() {
		$hook = add_management_page(
			__( 'Sandbox copy', 'sandboxd-connector' ),
			__( 'Sandbox copy', 'sandboxd-connector' ),
			self::CAP,
			self::SLUG,
			array( __CLASS__, 'render' )
		);
		add_action( 'admin_print_scripts-' . $hook, array( __CLASS__, 'assets' ) );
	}

	/**
	 * The page's URL, with optional query arguments.
	 *
	 * @param array $args Query arguments.
	 * @return string
	 */
	public static function url( array $args = array() ) {
		return add_query_arg( array_merge( array( 'page' => self::SLUG ), $args ), admin_url( 'tools.php' ) );
	}

	/**
	 * Form posts and the OAuth callback, before any output.
	 */
	public static function handle_request() {
		if ( wp_doing_ajax() || ! isset( $_GET['page'] ) || self::SLUG !== $_GET['page'] ) {
			return;
		}
		if ( ! current_user_can( self::CAP ) ) {
			return; // WordPress refuses the page itself.
		}
		if ( isset( $_GET['sbx'] ) && 'callback' === $_GET['sbx'] ) {
			$r = Sbx_OAuth::callback( wp_unslash( $_GET ) );
			if ( is_wp_error( $r ) ) {
				self::flash( 'error', $r->get_error_message() );
			} else {
				self::flash( 'success', __( 'Connected to the service.', 'sandboxd-connector' ) );
			}
			wp_safe_redirect( self::url() );
			exit;
		}
		if ( 'POST' !== ( isset( $_SERVER['REQUEST_METHOD'] ) ? $_SERVER['REQUEST_METHOD'] : '' ) || empty( $_POST['sbx_action'] ) ) {
			return;
		}
		$action = sanitize_key( wp_unslash( $_POST['sbx_action'] ) );
		check_admin_referer( 'sbx_' . $action );
		switch ( $action ) {
			case 'save_url':
				$raw  = isset( $_POST['sbx_service_url'] ) ? wp_unslash( $_POST['sbx_service_url'] ) : '';
				$base = Sbx_Url_Rules::normalize_base( $raw );
				if ( '' === $base ) {
					self::flash( 'error', __( 'Enter the service URL with https:// (http:// is allowed only for localhost).', 'sandboxd-connector' ) );
				} else {
					Sbx_OAuth::set_base( $base );
					self::flash( 'success', __( 'Service URL saved.', 'sandboxd-connector' ) );
				}
				break;
			case 'connect':
				if ( '' === Sbx_OAuth::base() ) {
					self::flash( 'error', __( 'Save the service URL first.', 'sandboxd-connector' ) );
					break;
				}
				$url = Sbx_OAuth::begin();
				if ( is_wp_error( $url ) ) {
					self::flash( 'error', $url->get_error_message() );
					break;
				}
				$host = wp_parse_url( $url, PHP_URL_HOST );
				add_filter(
					'allowed_redirect_hosts',
					function ( $hosts ) use ( $host ) {
						$hosts[] = $host;
						return $hosts;
					}
				);
				wp_safe_redirect( $url );
				exit;
			case 'disconnect':
				Sbx_OAuth::disconnect();
				self::flash( 'success', __( 'Disconnected.', 'sandboxd-connector' ) );
				break;
		}
		wp_safe_redirect( self::url() );
		exit;
	}

	/**
	 * Keep a one-time message for the current user.
	 *
	 * @param string $type    success|error.
	 * @param string $message Text (escaped when shown).
	 */
	private static function flash( $type, $message ) {
		set_transient( 'sbx_notice_' . get_current_user_id(), array( $type, $message ), 300 );
	}

	/**
	 * Script and style for the page.
	 */
	public static function assets() {
		wp_enqueue_style( 'sbx-admin', SBX_URL . 'assets/admin.css', array(), SBX_VERSION );
		wp_enqueue_script( 'sbx-admin', SBX_URL . 'assets/admin.js', array(), SBX_VERSION, true );
		wp_localize_script(
			'sbx-admin',
			'sbxConnector',
			array(
				'ajaxUrl' => admin_url( 'admin-ajax.php' ),
				'nonce'   => wp_create_nonce( self::NONCE ),
				'view'    => Sbx_Job::view( Sbx_Job::load() ),
				'i18n'    => array(
					'confirmCancel' => __( 'Cancel this copy? Its temporary files are deleted.', 'sandboxd-connector' ),
					'network'       => __( 'The request failed. Press Resume to try again.', 'sandboxd-connector' ),
					'opening'       => __( 'Opening…', 'sandboxd-connector' ),
				),
			)
		);
	}

	/**
	 * The page.
	 */
	public static function render() {
		if ( ! current_user_can( self::CAP ) ) {
			return;
		}
		$base    = Sbx_OAuth::base();
		$conn    = Sbx_OAuth::connection();
		$view    = Sbx_Job::view( Sbx_Job::load() );
		$notice  = get_transient( 'sbx_notice_' . get_current_user_id() );
		delete_transient( 'sbx_notice_' . get_current_user_id() );
		$hidden  = ' hidden';
		?>
		<div class="wrap sbx-wrap">
			<h1><?php esc_html_e( 'Sandbox copy', 'sandboxd-connector' ); ?></h1>
			<p><?php esc_html_e( 'Copy this site — its database and wp-content — into a disposable sandbox on your Sandboxd service.', 'sandboxd-connector' ); ?></p>
			<?php if ( is_array( $notice ) && 2 === count( $notice ) ) : ?>
				<div class="notice notice-<?php echo 'success' === $notice[0] ? 'success' : 'error'; ?> is-dismissible"><p><?php echo esc_html( $notice[1] ); ?></p></div>
			<?php endif; ?>

			<h2><?php esc_html_e( 'Service', 'sandboxd-connector' ); ?></h2>
			<form method="post" action="<?php echo esc_url( self::url() ); ?>" class="sbx-row">
				<?php wp_nonce_field( 'sbx_save_url' ); ?>
				<input type="hidden" name="sbx_action" value="save_url">
				<label for="sbx-service-url"><?php esc_html_e( 'Service URL', 'sandboxd-connector' ); ?></label>
				<input type="url" id="sbx-service-url" name="sbx_service_url" class="regular-text" value="<?php echo esc_attr( $base ); ?>" placeholder="https://sandboxes.example.com" required>
				<button type="submit" id="sbx-save" class="button"><?php esc_html_e( 'Save', 'sandboxd-connector' ); ?></button>
			</form>

			<?php if ( '' !== $base ) : ?>
				<p id="sbx-status" class="sbx-status">
					<?php
					if ( $conn ) {
						$who = '' !== $conn['account_email'] ? $conn['account_email'] : __( 'your account', 'sandboxd-connector' );
						/* translators: %s: account email on the service. */
						echo esc_html( sprintf( __( 'Connected as %s', 'sandboxd-connector' ), $who ) );
					} elseif ( '' !== Sbx_OAuth::last_account() ) {
						esc_html_e( 'The connection has expired or was revoked. Reconnect to continue.', 'sandboxd-connector' );
					} else {
						esc_html_e( 'Not connected.', 'sandboxd-connector' );
					}
					?>
				</p>
				<form method="post" action="<?php echo esc_url( self::url() ); ?>" class="sbx-inline">
					<?php wp_nonce_field( 'sbx_connect' ); ?>
					<input type="hidden" name="sbx_action" value="connect">
					<button type="submit" id="sbx-connect" class="button<?php echo $conn ? '' : ' button-primary'; ?>">
						<?php $conn || '' !== Sbx_OAuth::last_account() ? esc_html_e( 'Reconnect', 'sandboxd-connector' ) : esc_html_e( 'Connect', 'sandboxd-connector' ); ?>
					</button>
				</form>
				<?php if ( $conn ) : ?>
					<form method="post" action="<?php echo esc_url( self::url() ); ?>" class="sbx-inline">
						<?php wp_nonce_field( 'sbx_disconnect' ); ?>
						<input type="hidden" name="sbx_action" value="disconnect">
						<button type="submit" id="sbx-disconnect" class="button-link"><?php esc_html_e( 'Disconnect', 'sandboxd-connector' ); ?></button>
					</form>
				<?php endif; ?>
			<?php else : ?>
				<p id="sbx-status" class="sbx-status"><?php esc_html_e( 'Enter your service URL to begin.', 'sandboxd-connector' ); ?></p>
			<?php endif; ?>

			<?php if ( $conn || $view['active'] ) : ?>
				<h2><?php esc_html_e( 'Copy', 'sandboxd-connector' ); ?></h2>
				<p class="description"><?php esc_html_e( 'The copy is built and uploaded in small steps while this page is open. You can close it and come back: it continues where it stopped.', 'sandboxd-connector' ); ?></p>
				<p>
					<button type="button" id="sbx-start" class="button button-primary"<?php echo $conn && ! $view['active'] ? '' : $hidden; ?>><?php esc_html_e( 'Create a sandbox copy of this site', 'sandboxd-connector' ); ?></button>
				</p>
			<?php endif; ?>
			<div id="sbx-progress" class="sbx-progress" data-state="<?php echo esc_attr( $view['state'] ); ?>"<?php echo 'idle' === $view['state'] && '' === $view['label'] ? $hidden : ''; ?>>
				<div class="sbx-bar"><div class="sbx-bar-fill" style="width: <?php echo (int) $view['percent']; ?>%"></div></div>
				<p id="sbx-phase" class="sbx-phase"><?php echo esc_html( $view['label'] ); ?></p>
				<p id="sbx-error" class="sbx-error" role="alert"<?php echo '' === $view['error'] ? $hidden : ''; ?>><?php echo esc_html( $view['error'] ); ?></p>
				<p class="sbx-result"<?php echo 'ready' === $view['state'] ? '' : $hidden; ?>>
					<?php esc_html_e( 'Your sandbox:', 'sandboxd-connector' ); ?>
					<a id="sbx-result-url" href="<?php echo esc_url( $view['siteUrl'] ); ?>" target="_blank" rel="noopener noreferrer"><?php echo esc_html( $view['siteUrl'] ); ?></a>
					<button type="button" id="sbx-open-admin" class="button button-primary"><?php esc_html_e( 'Open wp-admin', 'sandboxd-connector' ); ?></button>
				</p>
				<p class="sbx-actions">
					<button type="button" id="sbx-resume" class="button"<?php echo $view['paused'] ? '' : $hidden; ?>><?php esc_html_e( 'Resume', 'sandboxd-connector' ); ?></button>
					<button type="button" id="sbx-cancel" class="button-link sbx-danger"<?php echo $view['active'] ? '' : $hidden; ?>><?php esc_html_e( 'Cancel', 'sandboxd-connector' ); ?></button>
				</p>
				<ul id="sbx-notes" class="sbx-notes"></ul>
			</div>
		</div>
		<?php
	}

	/**
	 * Nonce and capability: the first thing every ajax action does.
	 */
	private static function guard() {
		check_ajax_referer( self::NONCE, 'nonce' );
		if ( ! current_user_can( self::CAP ) ) {
			wp_send_json_error( array( 'message' => __( 'You are not allowed to do this.', 'sandboxd-connector' ) ), 403 );
		}
	}

	/**
	 * Ajax: start a copy.
	 */
	public static function ajax_start() {
		self::guard();
		if ( ! Sbx_OAuth::connection() ) {
			wp_send_json_error( array( 'message' => __( 'Connect to the service first.', 'sandboxd-connector' ) ), 400 );
		}
		try {
			wp_send_json_success( Sbx_Job::start() );
		} catch ( Exception $e ) {
			wp_send_json_error( array( 'message' => $e->getMessage() ), 409 );
		}
	}

	/**
	 * Ajax: one step (Resume sends resume=1).
	 */
	public static function ajax_step() {
		self::guard();
		if ( function_exists( 'set_time_limit' ) ) {
			@set_time_limit( 300 );
		}
		ignore_user_abort( true );
		wp_send_json_success( Sbx_Job::step( ! empty( $_POST['resume'] ) ) );
	}

	/**
	 * Ajax: cancel.
	 */
	public static function ajax_cancel() {
		self::guard();
		wp_send_json_success( Sbx_Job::cancel() );
	}

	/**
	 * Ajax: a fresh one-time login URL for the ready sandbox.
	 */
	public static function ajax_login() {
		self::guard();
		try {
			wp_send_json_success( array( 'loginUrl' => Sbx_Job::login_url() ) );
		} catch ( Exception $e ) {
			wp_send_json_error( array( 'message' => $e->getMessage() ), 400 );
		}
	}
}
